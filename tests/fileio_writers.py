"""Every writer of files hwquant has, each writing one target in a folder of its own: tests/test_fileio.py kills
each in the middle of the write (a child process blocked at the rename) and writes the same targets again.

Writers: the TPC JSON export; PyTorch's ONNX and TorchScript exports and saved quantized model; Keras' .keras
and ONNX exports (TFLite on the TensorFlow backend); the troubleshooting report (xquant, a folder written
through a staging folder). Data generation writes no file."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, List

import numpy as np

import hwquant as mct
from backend_kit import kits, make_kit

SPECS = [("conv", 4, 3), ("relu",)]
IN_SHAPE = (3, 8, 8)
# name: (file or folder written, the framework it needs: None for none)
TARGETS = {
    "tpc_json": ("tpc.json", None),
    "torch_onnx": ("model.onnx", "torch"),
    "torch_torchscript": ("model.torchscript", "torch"),
    "torch_saved": ("model.pt", "torch"),
    "keras": ("model.keras", "keras"),
    "keras_onnx": ("model.onnx", "keras"),
    "tflite": ("model.tflite", "keras"),
    "xquant": ("report", "any"),  # a folder: report.json and MCT's files in it
}


def available() -> List[str]:
    """The writers this environment can run."""
    present = kits()
    names = [n for n, (_, fw) in TARGETS.items() if fw is None or fw in present or (fw == "any" and present)]
    if "keras" in present:
        import keras
        if keras.backend.backend() != "tensorflow":
            names.remove("tflite")
        if keras.backend.backend() == "tensorflow":
            import importlib.util
            if importlib.util.find_spec("tf2onnx") is None:
                names.remove("keras_onnx")
    return names


class Writers:
    """The writers over one root folder: `target(name)` is root/name/<file>; `write(name)` writes it."""

    def __init__(self, root: os.PathLike):
        self.root = Path(root)
        self._models: Dict[str, Any] = {}

    def target(self, name: str) -> Path:
        return self.root / name / TARGETS[name][0]

    def _quantized(self, framework: str) -> tuple:
        if framework not in self._models:
            kit = make_kit(framework)
            model = kit.model(IN_SHAPE, SPECS)
            batches = kit.batches(IN_SHAPE, n=1, batch=4)
            self._models[framework] = (kit, model, kit.ptq(model, batches)[0], batches)
        return self._models[framework]

    def prepare(self, names: List[str]) -> None:
        """Quantize the models the writers `names` write (before any of them starts writing)."""
        for name in names:
            framework = TARGETS[name][1]
            if framework is not None:
                self._quantized(kits()[0] if framework == "any" else framework)

    def write(self, name: str) -> None:
        self.target(name).parent.mkdir(exist_ok=True)
        self._writers()[name](self.target(name))

    def _writers(self) -> Dict[str, Callable[[Path], Any]]:
        from hwquant.exporter import KerasExportSerializationFormat as K
        from hwquant.exporter import PytorchExportSerializationFormat as P
        from hwquant.exporter import QuantizationFormat as Q

        def torch(fn):
            def write(path):
                kit, _, q, batches = self._quantized("torch")
                return fn(q, path, kit.data_gen(batches))
            return write

        def keras(fn):
            return lambda path: fn(self._quantized("keras")[2], path)

        def xquant(path):
            kit, model, q, batches = self._quantized(kits()[0])
            val = [(b[0], np.zeros(len(b[0]))) for b in batches]
            report = getattr(mct.xquant, f"xquant_report_{kit.facade_prefix}_experimental")
            return report(model, q, kit.data_gen(batches), lambda: iter(val),
                          mct.xquant.XQuantConfig(path, measure_fixes=0))

        return {
            "tpc_json": lambda path: mct.target_platform_capabilities.export_target_platform_capabilities(
                mct.get_target_platform_capabilities(), path),
            "torch_onnx": torch(lambda q, path, data: mct.exporter.pytorch_export_model(q, path, data)),
            "torch_torchscript": torch(lambda q, path, data: mct.exporter.pytorch_export_model(
                q, path, data, serialization_format=P.TORCHSCRIPT, quantization_format=Q.FAKELY_QUANT)),
            "torch_saved": torch(lambda q, path, data: mct.exporter.save_quantized_model(q, path)),
            "keras": keras(lambda q, path: mct.exporter.keras_export_model(q, path)),
            "keras_onnx": keras(lambda q, path: mct.exporter.keras_export_model(
                q, path, serialization_format=K.ONNX, quantization_format=Q.FAKELY_QUANT)),
            "tflite": keras(lambda q, path: mct.exporter.keras_export_model(
                q, path, serialization_format=K.TFLITE, quantization_format=Q.INT8)),
            "xquant": xquant,
        }
