"""The two back ends behind one small interface, so that a pass test is written once and run on both
(tests/test_pass_templates.py). Models are described framework-free, as a sequence of layer specs
over an input of (channels, height, width) or (features,); each kit builds them in its framework
(PyTorch channels first, Keras channels last) and runs the core's pipeline stages on them.

Layer specs: ("conv", out_channels, kernel[, bias]) with 'same' padding, ("bn",), ("relu",),
("silu",), ("hswish",), ("dense", units[, bias]); ("residual", kernel): a same-shape convolution plus its input.
"""
from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np

from hwquant.core.pipeline.candidates import select_base_configs
from hwquant.core.configuration.config import CoreConfig, QuantizationConfig
from hwquant.core.pipeline.stages import calibrate, compute_parameters, prepare
from hwquant.core.pipeline.state import PipelineState
from hwquant.tpc.platforms import get_target_platform_capabilities


class _Kit:
    name = ""
    channel_axis = 1

    def batches(self, in_shape: Sequence[int], n: int = 3, batch: int = 8, scale: float = 1.0, seed: int = 0) -> List[list]:
        rng = np.random.default_rng(seed)
        return [[self.tensor(scale * rng.standard_normal((batch,) + tuple(in_shape)).astype(np.float32))]
                for _ in range(n)]

    def state(self, model: Any, batches: List[list], tpc: Any = None, **qc: Any) -> PipelineState:
        """A pipeline state calibrated on `batches` with parameters computed (before any correction);
        `qc`: QuantizationConfig fields, `tpc`: the default TPC unless given."""
        graph = self.capture(model, batches[0])
        state = PipelineState(graph, CoreConfig(quantization_config=QuantizationConfig(**qc)), self.adapter(graph),
                              tpc or get_target_platform_capabilities())
        prepare(state)
        calibrate(state, batches)
        select_base_configs(state.graph)
        compute_parameters(state)
        return state

    def quantized_output(self, state: PipelineState, x: Any) -> np.ndarray:
        return self.run(state.adapter.build(state.graph, quantized=True), x)

    def graph_output(self, graph: Any, x: Any) -> np.ndarray:
        return self.run(self.adapter(graph).build(graph, quantized=False), x)

    def channel_means(self, y: np.ndarray) -> np.ndarray:
        return y.mean(axis=tuple(d for d in range(y.ndim) if d != self.channel_axis % y.ndim))

    # ---- the facades, as a user calls them (tests/test_facades_both_frameworks.py)
    def data_gen(self, batches: List[list]):
        return lambda: iter(batches)

    def ptq(self, model: Any, batches: List[list], **kwargs: Any) -> tuple:
        import hwquant as mct

        return getattr(mct.ptq, f"{self.facade_prefix}_post_training_quantization")(model, self.data_gen(batches),
                                                                                     **kwargs)

    def prune(self, model: Any, batches: List[list], target_bytes: float, **kwargs: Any) -> tuple:
        import hwquant as mct

        return getattr(mct.pruning, f"{self.facade_prefix}_pruning_experimental")(
            model, mct.core.ResourceUtilization(weights_memory=target_bytes), self.data_gen(batches), **kwargs)

    def resource_utilization_data(self, model: Any, batches: List[list], **kwargs: Any) -> Any:
        import hwquant as mct

        return getattr(mct.core, f"{self.facade_prefix}_resource_utilization_data")(model, self.data_gen(batches),
                                                                                   **kwargs)


class TorchKit(_Kit):
    name, channel_axis, facade_prefix = "torch", 1, "pytorch"

    def __init__(self):
        import torch
        from torch import nn

        self.torch, self.nn = torch, nn

    def tensor(self, a: np.ndarray) -> Any:
        return self.torch.from_numpy(a)

    def model(self, in_shape: Sequence[int], specs: Sequence[tuple]) -> Any:
        nn, torch = self.nn, self.torch
        channels, layers, spatial = in_shape[0], [], list(in_shape[1:])
        for kind, *args in specs:
            if kind == "conv":
                out, k, *bias = args
                layers.append(nn.Conv2d(channels, out, k, padding=k // 2, bias=bias[0] if bias else True))
                channels = out
            elif kind == "dense":
                out, *bias = args
                layers.append(nn.Linear(channels, out, bias=bias[0] if bias else True))
                channels = out
            elif kind == "dwconv":
                k, *bias = args
                layers.append(nn.Conv2d(channels, channels, k, padding=k // 2, groups=channels,
                                        bias=bias[0] if bias else True))
            elif kind == "maxpool":
                layers.append(nn.MaxPool2d(2))
                spatial = [d // 2 for d in spatial]
            elif kind == "flatten":
                layers.append(nn.Flatten())
                channels = channels * int(np.prod(spatial))
            elif kind == "residual":
                conv = nn.Conv2d(channels, channels, args[0], padding=args[0] // 2)

                class Residual(nn.Module):
                    def __init__(self):
                        super().__init__()
                        self.conv = conv  # noqa: B023 (instantiated at once below: not stale)

                    def forward(self, x):
                        return self.conv(x) + x

                layers.append(Residual())
            else:
                # the factory is called at once: no stale loop variable
                layers.append({"bn": lambda: nn.BatchNorm2d(channels), "relu": nn.ReLU, "silu": nn.SiLU,  # noqa: B023
                               "prelu": lambda: nn.PReLU(channels, init=0.1),  # noqa: B023
                               "hswish": nn.Hardswish}[kind]())
        model = nn.Sequential(*layers).eval()
        with torch.no_grad():
            for m in model.modules():
                if isinstance(m, nn.BatchNorm2d):  # statistics a trained net would have
                    m.running_mean.uniform_(-0.3, 0.3)
                    m.running_var.uniform_(0.5, 2.0)
                    m.weight.uniform_(0.5, 1.5)
        return model

    def params(self, model: Any) -> int:
        return sum(p.numel() for p in model.parameters())

    def zero_channels(self, model: Any, conv_index: int, channels: Sequence[int], bias: float = 0.0) -> None:
        """Zero output channels of the model's ``conv_index``-th (non-depthwise) convolution (their bias set to
        ``bias`` where it has one: constant channels)."""
        convs = [m for m in model.modules() if isinstance(m, self.nn.Conv2d) and m.groups == 1]
        with self.torch.no_grad():
            convs[conv_index].weight[list(channels)] = 0.0
            if convs[conv_index].bias is not None:
                convs[conv_index].bias[list(channels)] = bias

    def capture(self, model: Any, batch: list) -> Any:
        from hwquant.torch.capture.routes import capture

        return capture(model, batch)

    def adapter(self, graph: Any) -> Any:
        from hwquant.torch.adapter import PytorchAdapter

        return PytorchAdapter()

    def run(self, model: Any, x: Any) -> np.ndarray:
        with self.torch.no_grad():
            return model(x).numpy()

    def export_and_run(self, quantized: Any, folder: Any, batches: List[list], x: Any) -> np.ndarray:
        """The deployment file (MCTQ ONNX), written and run by ONNX Runtime."""
        import hwquant as mct

        path = mct.exporter.pytorch_export_model(quantized, folder / "model.onnx", self.data_gen(batches))
        session = mct.exporter.mctq_inference_session(str(path))
        return session.run(None, {session.get_inputs()[0].name: np.asarray(x)})[0]

    def save_and_load(self, quantized: Any, folder: Any) -> Any:
        import hwquant as mct

        return mct.exporter.load_quantized_model(mct.exporter.save_quantized_model(quantized, folder / "model.pt"))


class KerasKit(_Kit):
    name, channel_axis, facade_prefix = "keras", -1, "keras"

    def __init__(self):
        import keras

        self.keras = keras

    def tensor(self, a: np.ndarray) -> Any:
        return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if a.ndim == 4 else a

    def model(self, in_shape: Sequence[int], specs: Sequence[tuple]) -> Any:
        keras, L = self.keras, self.keras.layers
        keras.utils.set_random_seed(0)
        shape = tuple(in_shape[1:]) + (in_shape[0],) if len(in_shape) == 3 else tuple(in_shape)
        x = inp = keras.Input(shape)
        for kind, *args in specs:
            if kind == "conv":
                out, k, *bias = args
                x = L.Conv2D(out, k, padding="same", use_bias=bias[0] if bias else True)(x)
            elif kind == "dense":
                out, *bias = args
                x = L.Dense(out, use_bias=bias[0] if bias else True)(x)
            elif kind == "dwconv":
                k, *bias = args
                x = L.DepthwiseConv2D(k, padding="same", use_bias=bias[0] if bias else True)(x)
            elif kind == "maxpool":
                x = L.MaxPooling2D(2)(x)
            elif kind == "flatten":
                x = L.Flatten()(x)
            elif kind == "residual":
                x = keras.ops.add(L.Conv2D(x.shape[-1], args[0], padding="same")(x), x)
            elif kind == "bn":
                bn = L.BatchNormalization()
                x = bn(x)
                rng = np.random.default_rng(0)
                c = x.shape[-1]
                bn.set_weights([rng.uniform(0.5, 1.5, c), rng.uniform(-0.2, 0.2, c), rng.uniform(-0.3, 0.3, c),
                                rng.uniform(0.5, 2.0, c)])
            else:
                x = {"relu": L.ReLU, "silu": lambda: L.Activation("silu"),
                     "prelu": lambda: L.PReLU(keras.initializers.Constant(0.1), shared_axes=[1, 2]),
                     "hswish": lambda: L.Activation("hard_silu")}[kind]()(x)
        return keras.Model(inp, x)

    def params(self, model: Any) -> int:
        return int(model.count_params())

    def zero_channels(self, model: Any, conv_index: int, channels: Sequence[int], bias: float = 0.0) -> None:
        L = self.keras.layers
        convs = [la for la in model.layers if isinstance(la, L.Conv2D) and not isinstance(la, L.DepthwiseConv2D)]
        kernel, *rest = convs[conv_index].get_weights()
        kernel[..., list(channels)] = 0.0
        if rest:
            rest[0][list(channels)] = bias
        convs[conv_index].set_weights([kernel, *rest])

    def capture(self, model: Any, batch: list) -> Any:
        from hwquant.keras.capture import capture

        return capture(model, batch)

    def adapter(self, graph: Any) -> Any:
        from hwquant.keras.adapter import KerasAdapter

        return KerasAdapter(graph)

    def run(self, model: Any, x: Any) -> np.ndarray:
        return np.asarray(model.predict_on_batch(x))

    def export_and_run(self, quantized: Any, folder: Any, batches: List[list], x: Any) -> np.ndarray:
        """The deployment file (MCTQ .keras), written, loaded back and run."""
        import hwquant as mct

        path = mct.exporter.keras_export_model(quantized, folder / "model.keras")
        return self.run(mct.keras_load_quantized_model(path), x)

    def save_and_load(self, quantized: Any, folder: Any) -> Any:
        import hwquant as mct

        quantized.save(folder / "saved.keras")
        return mct.keras_load_quantized_model(folder / "saved.keras")


def kits() -> List[str]:
    """The back ends this environment has (the TensorFlow CI venv has no torch)."""
    import importlib.util

    return [name for name, module in (("torch", "torch"), ("keras", "keras")) if importlib.util.find_spec(module)]


def make_kit(name: str) -> _Kit:
    return {"torch": TorchKit, "keras": KerasKit}[name]()
