"""Keep benchmark figures from going down unnoticed: each run's figures are saved under
benchmarks/results/<name>.json (committed with the BENCHMARKS.md section they fill), and the next run
compares its own with them and names every drop beyond noise.

A figure is {model: {tool: {"sqnr_db": .., "task": .., ...}}}; higher is better for both. The runs are
deterministic on one machine (seeded data, CPU arithmetic), so any drop is a change of the code or the
data; the tolerances absorb another CPU's arithmetic.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, List

RESULTS = Path(__file__).resolve().parent / "results"
SQNR_TOLERANCE_DB = 0.3
TASK_TOLERANCE = 0.01

Figures = Dict[str, Dict[str, Dict[str, float]]]


def previous(name: str) -> Figures:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text())["figures"] if path.exists() else {}


def drops(before: Figures, now: Figures) -> List[str]:
    """One line per figure that went down beyond noise (models and tools present in both runs)."""
    found = []
    for model, tools in now.items():
        for tool, figures in tools.items():
            old = before.get(model, {}).get(tool, {})
            for key, tolerance, unit in (("sqnr_db", SQNR_TOLERANCE_DB, " dB"), ("task", TASK_TOLERANCE, "")):
                a, b = old.get(key), figures.get(key)
                if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)):
                    continue
                if b < a - tolerance:
                    found.append(f"{model} / {tool}: {key} {b:.3f}{unit}, down from {a:.3f}{unit}")
    return found


def save(name: str, figures: Figures, note: str = "") -> Path:
    """Merge `figures` into the saved ones (a run on some models keeps the others' figures)."""
    merged = previous(name)
    for model, tools in figures.items():
        merged.setdefault(model, {}).update(tools)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"note": note, "figures": merged}, indent=1, sort_keys=True) + "\n")
    return path
