"""The report's files: MCT's (quant_report.json, troubleshoot_report.json, the similarity graphs and outlier
histograms as PNG, TensorBoard events) and hwquant's (report.json, report.html). Everything is written into
a staging folder first and moved into the report folder only when complete: a failure leaves the folder as
it was, and a staging folder a killed process left is removed by the next report written into the folder
(fileio.remove_stale_temporaries)."""
from __future__ import annotations

import json
import logging
import math
import os
import re
import shutil
import tempfile
from typing import Any, Dict, List, Optional

import numpy as np

from hwquant.errors import FileWriteError
from hwquant.fileio import remove_stale_temporaries

log = logging.getLogger("hwquant.xquant")

REPORT_FILENAME = "quant_report.json"             # MCT's names
TROUBLESHOOT_REPORT_FILENAME = "troubleshoot_report.json"
OUTLIER_FOLDER = "outlier_histgrams"              # (sic: MCT's spelling, which its users' scripts read)


def plain(value: Any) -> Any:
    """JSON-safe: non-finite floats as strings ('inf', '-inf', 'nan'), numpy values as Python ones, tuples
    as lists."""
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else str(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.ndarray):
        return plain(value.tolist())
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _pyplot() -> Any:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        return None


def _similarity_graph(plt: Any, path: str, metric: str, dataset: str, intermediate: Dict[str, Dict[str, float]],
                      degraded: List[str], threshold: float) -> None:
    names = list(intermediate)
    values = [intermediate[n][metric] for n in names]
    values = [v if math.isfinite(v) else np.nan for v in values]
    marked = [i for i, n in enumerate(names) if n in degraded]
    # fixed margins instead of tight_layout, which draws the hundred rotated labels twice
    height, label_inches = 5.0, 0.075 * max((len(n) for n in names), default=1) + 0.6
    fig, ax = plt.subplots(figsize=(max(len(names) / 4.5, 6), height + label_inches))
    ax.plot(range(len(names)), values, markevery=marked, marker="o", markersize=14, markeredgecolor="r",
            markerfacecolor="none", markeredgewidth=2)
    ax.grid()
    ax.set_title(f"quant_loss_{metric}_{dataset}")
    ax.set_xlabel("layer name")
    ax.set_ylabel(metric)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=90, fontsize=7)
    for i in marked:
        ax.get_xticklabels()[i].set_color("red")
    ax.axhline(threshold, color="red", linestyle="dashed")
    fig.subplots_adjust(bottom=label_inches / (height + label_inches), left=0.06, right=0.98, top=0.94)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _outlier_histogram(plt: Any, path: str, name: str, values: np.ndarray, mean: float, std: float,
                       z: float) -> None:
    fig, ax = plt.subplots(figsize=(10, 5))
    ax.hist(values, bins=100, color="steelblue")
    for sign in (-1, 1):
        ax.axvline(mean + sign * z * std, color="red", linestyle="dashed")
    ax.set_title(f"{name}: float values; red: mean \u00b1 {z} standard deviations")
    ax.set_xlabel("value")
    ax.set_ylabel("count (sample)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _tensorboard(folder: str, report: Dict[str, Any], profiles: Dict[str, Any]) -> Optional[str]:
    """TensorBoard events as MCT writes them (float histograms per layer, the output similarity as text) plus
    each metric over the layers as scalars; None when tensorboardX is missing."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError:
        return None
    writer = SummaryWriter(logdir=folder)
    try:
        for name, profile in profiles.items():
            values = profile.values()
            if values.size:
                writer.add_histogram(f"xquant/{name}", values, 0)
        for dataset in ("repr", "val"):
            out = report["output"][dataset]
            writer.add_text(f"output_similarity_metrics_{dataset}",
                            ", ".join(f"{k}: {v}" for k, v in out.items() if k != "batches"), 0)
        for step, row in enumerate(r for r in report["layers"] if r["similarity_repr"]):
            for metric, value in row["similarity_repr"].items():
                if isinstance(value, float) and math.isfinite(value):
                    writer.add_scalar(f"xquant_layers_repr/{metric}", value, step)
    finally:
        writer.close()
    return folder


def write_report(config: Any, report: Dict[str, Any], similarity: Dict[str, Any], troubleshoot: Optional[Dict[str, list]],
                 profiles: Dict[str, Any]) -> List[str]:
    """Write every file; returns their paths. Notes on what could not be written (a missing optional package)
    go into the report and the log, once."""
    from hwquant.xquant.render import render_html

    report_dir = config.report_dir
    remove_stale_temporaries(report_dir)  # a killed report's staging folder (and killed writers' files)
    staging = tempfile.mkdtemp(prefix=f".hwquant-xquant-{os.getpid()}-", dir=report_dir)
    notes = report.setdefault("notes", [])
    try:
        def put(rel: str, data: Any) -> None:
            path = os.path.join(staging, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)

        put(REPORT_FILENAME, json.dumps(plain(similarity), indent=2))
        plt = _pyplot() if troubleshoot is not None or config.html else None
        if troubleshoot is not None:
            put(TROUBLESHOOT_REPORT_FILENAME, json.dumps(plain(troubleshoot), indent=2))
            if plt is None:
                notes.append("matplotlib is not installed: the similarity graphs and outlier histograms (PNG) were not "
                             "drawn (pip install matplotlib)")
            else:
                names = {"repr": "intermediate_similarity_metrics_repr", "val": "intermediate_similarity_metrics_val"}
                for metric, threshold in config.threshold_quantize_error.items():
                    for dataset, key in names.items():
                        intermediate = similarity[key]
                        if intermediate and metric in next(iter(intermediate.values())):
                            _similarity_graph(plt, os.path.join(staging, f"quant_loss_{metric}_{dataset}.png"), metric,
                                              dataset, intermediate, report["degraded"], threshold)
                os.makedirs(os.path.join(staging, OUTLIER_FOLDER), exist_ok=True)
                for name, _ in troubleshoot.get("outlier_removal", []):
                    p = profiles[name]
                    _outlier_histogram(plt, os.path.join(staging, OUTLIER_FOLDER, f"{safe_name(name)}.png"), name,
                                       p.values(), p.mean, p.std, config.threshold_zscore_outlier_removal)
        if config.tensorboard:
            if _tensorboard(os.path.join(staging, "tensorboard"), report, profiles) is None:
                notes.append("tensorboardX is not installed: no TensorBoard events were written (pip install "
                             "tensorboardX)")
        for note in notes:
            log.warning("xquant: %s", note)
        if config.html:
            put("report.html", render_html(report))
        put("report.json", json.dumps(plain(report), indent=2))
        written = []
        for root, _, files in os.walk(staging):
            for name in files:
                rel = os.path.relpath(os.path.join(root, name), staging)
                target = os.path.join(report_dir, rel)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                os.replace(os.path.join(root, name), target)
                written.append(target)
        return sorted(written)
    except OSError as e:
        raise FileWriteError(report_dir, e) from e
    finally:
        shutil.rmtree(staging, ignore_errors=True)
