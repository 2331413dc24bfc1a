"""Fidelity and accuracy metrics shared by our PTQ and the peer runners (torch only, any venv)."""
from __future__ import annotations

import time
from contextlib import contextmanager

import torch


def top1_agreement(float_logits: torch.Tensor, q_logits: torch.Tensor) -> float:
    """Fraction of inputs where the quantized model's top-1 class equals the float model's."""
    return (float_logits.argmax(1) == q_logits.argmax(1)).double().mean().item()


def sqnr_db(float_out: torch.Tensor, q_out: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio over all outputs: 10 log10(sum f^2 / sum (f - q)^2)."""
    f, q = float_out.double(), q_out.double()
    noise = ((f - q) ** 2).sum().item()
    return float("inf") if noise == 0 else 10.0 * torch.log10((f ** 2).sum() / noise).item()


def labelled_top1(logits: torch.Tensor, labels: torch.Tensor) -> int:
    """Number of inputs whose top-1 prediction equals the label (a count: the labelled sets are tiny)."""
    return int((logits.argmax(1) == labels).sum().item())


@torch.no_grad()
def predict(model, x: torch.Tensor, batch: int = 256) -> torch.Tensor:
    """Logits of model on x, in batches (keeps memory flat for 224x224 inputs)."""
    return torch.cat([model(x[i:i + batch]) for i in range(0, len(x), batch)])


def accuracy(model, x: torch.Tensor, y: torch.Tensor, batch: int = 1000) -> float:
    return (predict(model, x, batch).argmax(1) == y).double().mean().item()


@contextmanager
def timed(store: dict, key: str = "seconds"):
    """`with timed(d): ...` stores the block's wall time (perf_counter) in d[key]."""
    t0 = time.perf_counter()
    try:
        yield store
    finally:
        store[key] = time.perf_counter() - t0


# Operators whose weight inputs a quantizer would quantize (ONNX Runtime's QDQ puts a DequantizeLinear
# between a quantized initializer and its reader).
_ONNX_WEIGHT_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "LSTM", "GRU", "RNN", "Gather", "PRelu",
                    "BatchNormalization", "InstanceNormalization", "LayerNormalization", "Einsum"}


def onnx_layers_left_float(path) -> int:
    """Operators of an ONNX file that read a float weight (an initializer of more than one value) directly,
    not through a DequantizeLinear: the layers a QDQ quantizer left float."""
    import numpy as np
    import onnx

    model = onnx.load(str(path))
    floats = {i.name for i in model.graph.initializer
              if i.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16) and int(
                  np.prod(i.dims or [1])) > 1}
    return sum(1 for n in model.graph.node if n.op_type in _ONNX_WEIGHT_OPS and any(i in floats for i in n.input))
