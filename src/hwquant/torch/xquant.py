"""mct.xquant's PyTorch facades and the report's PyTorch back end (the report itself: hwquant.xquant)."""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Sequence, Tuple

import numpy as np
import torch

from hwquant.concurrency import framework_call
from hwquant.core.configuration.config import CoreConfig
from hwquant.xquant.analysis import XQuantInputError, check_reference, model_inputs
from hwquant.xquant.backend import BatchRun, LayerFacts, QuantizerFacts
from hwquant.xquant.config import XQuantConfig
from hwquant.xquant.report import RunSettings, run_report


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


class TorchXQuantBackend:
    """The float model, the reference graph made from it, and the quantized model, run side by side."""

    framework = "pytorch"

    def __init__(self, float_model: torch.nn.Module, quantized_model: torch.nn.Module,
                 repr_dataset: Callable[[], Any], settings: RunSettings):
        from hwquant.core.pipeline.stages import prepare
        from hwquant.torch.output_error import flat_tensors
        from hwquant.torch.quantizers import PytorchActivationQuantizationHolder, PytorchQuantizationWrapper
        from hwquant.torch.session import start_session

        if not isinstance(float_model, torch.nn.Module) or not isinstance(quantized_model, torch.nn.Module):
            raise XQuantInputError(f"float_model and quantized_model must be torch.nn.Module objects, got "
                                   f"{type(float_model).__name__} and {type(quantized_model).__name__}")
        self._flat = flat_tensors
        self.float_model = float_model.eval()
        self.quantized_model = quantized_model.eval()
        self.repr_dataset = repr_dataset
        session = start_session(float_model, repr_dataset,
                                CoreConfig(quantization_config=settings.core_config.quantization_config), settings.tpc)
        prepare(session.state)
        self.reference = session.state.graph
        self.adapter = session.adapter
        self.device = session.adapter.device
        placement = getattr(quantized_model, "meta", {}).get("hwquant_placement") if \
            isinstance(quantized_model, torch.fx.GraphModule) else None
        modules = dict(quantized_model.named_modules())
        holders = dict(getattr(quantized_model, "node_to_activation_quantization_holder", {}) or {})
        self._modules: Dict[str, torch.nn.Module] = {}   # node -> the module whose output is compared
        self._layers: Dict[str, LayerFacts] = {}
        for path, module in modules.items():
            if isinstance(module, PytorchActivationQuantizationHolder):
                node = next((n for n, h in holders.items() if h == path), path.removesuffix("_activation_holder_quantizer"))
                layer = self._layers.setdefault(node, LayerFacts(node, ""))
                layer.activation = QuantizerFacts.of(module.activation_holder_quantizer)
                self._modules[node] = module
            elif isinstance(module, PytorchQuantizationWrapper):
                node = next((n for n, p in (placement or {}).items() if p.get("layer") == path), path)
                layer = self._layers.setdefault(node, LayerFacts(node, ""))
                layer.layer_type = type(module.layer).__name__
                layer.weights = {k: f for k, q in module.weights_quantizers.items() if (f := QuantizerFacts.of(q)) is not None}
                bias = getattr(module.layer, "bias", None)
                layer.bias = None if not isinstance(bias, torch.Tensor) else _numpy(module.float_weight("bias"))
                self._modules.setdefault(node, module)
        for name, layer in self._layers.items():
            if not layer.layer_type:
                target = modules.get((placement or {}).get(name, {}).get("layer", name))
                node = self.reference.node(name) if name in self.reference else None
                layer.layer_type = type(target).__name__ if target is not None else \
                    getattr(getattr(node, "type", None), "__name__", str(getattr(node, "type", "?")))
        self._observers: Dict[Tuple[str, ...], torch.nn.Module] = {}
        self._float_checked = False

    def layers(self) -> List[LayerFacts]:
        return list(self._layers.values())

    def batches(self, dataset: Callable[[], Any], validation: bool) -> Iterator[List[Any]]:
        for item in dataset():
            yield [torch.as_tensor(np.asarray(x) if isinstance(x, np.ndarray) else x).to(self.device)
                   for x in model_inputs(item, validation)]

    def _observer(self, names: Sequence[str]) -> torch.nn.Module:
        from hwquant.torch.builder import build_module
        key = tuple(names)
        if key not in self._observers:
            self._observers = {key: build_module(self.reference, None, extra_outputs=list(names)).to(self.device).eval()}
        return self._observers[key]

    @torch.no_grad()
    def run(self, batch: List[Any], names: Sequence[str]) -> BatchRun:
        outputs, tensors = self._observer(names)(*batch)
        reference_outputs = [_numpy(t) for t in self._flat(outputs)]
        if not self._float_checked:  # the reference stands for the float model: checked on the first batch
            check_reference(reference_outputs, [_numpy(t) for t in self._flat(self.float_model(*batch))])
            self._float_checked = True
        float_tensors = {n: _numpy(t) for n, t in zip(names, tensors)}
        captured: Dict[str, np.ndarray] = {}
        hooks = []
        for name in names:
            module = self._modules.get(name)
            if module is not None:
                hooks.append(module.register_forward_hook(
                    lambda m, i, o, name=name: captured.__setitem__(name, _numpy(o))))
        try:
            quantized_outputs = [_numpy(t) for t in self._flat(self.quantized_model(*batch))]
        finally:
            for h in hooks:
                h.remove()
        # a profiled input of a merging layer that the quantized model does not quantize: its float value
        for name in names:
            captured.setdefault(name, float_tensors[name])
        return BatchRun(reference_outputs, quantized_outputs, float_tensors, captured)

    def output_sensitivity(self, batch: List[Any], names: Sequence[str], probes: np.ndarray) -> Dict[str, float]:
        model = self._observer(names)
        totals = dict.fromkeys(names, 0.0)
        with torch.enable_grad():
            for probe in probes:
                xs = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in batch]
                outputs, tensors = model(*xs)
                flat = torch.cat([o.reshape(-1) for o in self._flat(outputs)])
                loss = (flat * torch.as_tensor(probe[:flat.numel()], dtype=flat.dtype, device=flat.device)).sum()
                grads = torch.autograd.grad(loss, list(tensors), allow_unused=True)
                for name, g in zip(names, grads):
                    if g is not None:
                        totals[name] += float(g.double().pow(2).sum()) / (len(batch[0]) * len(probes))
        return totals

    def native(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array))

    def quantize(self, core_config: Any, tpc: Any, target: Any) -> torch.nn.Module:
        from hwquant.torch.facade import pytorch_post_training_quantization
        return pytorch_post_training_quantization(self.float_model, self.repr_dataset, target, core_config, tpc)[0]

    def quantize_gptq(self, core_config: Any, tpc: Any, n_epochs: int) -> torch.nn.Module:
        from hwquant.torch.gptq.facade import get_pytorch_gptq_config
        from hwquant.torch.gptq.facade import pytorch_gradient_post_training_quantization
        return pytorch_gradient_post_training_quantization(
            self.float_model, self.repr_dataset, core_config=core_config,
            gptq_config=get_pytorch_gptq_config(n_epochs), target_platform_capabilities=tpc)[0]

    @torch.no_grad()
    def outputs(self, model: Any, batch: List[Any]) -> List[np.ndarray]:
        return [_numpy(t) for t in self._flat(model(*batch))]


def load_float_model(path: str, trust: bool = False) -> torch.nn.Module:
    """A whole pickled module (torch.save(model, path)), read with torch.load(weights_only=True) and the torch.nn /
    torchvision / hwquant layer classes only (UnsafeModelFileError for a file naming anything else: hwquant.torch.
    model_files); `trust=True` reads it with full pickle, which runs any code the file holds."""
    from hwquant.torch.model_files import load_pickled_model
    model = load_pickled_model(path, trust=trust)
    if not isinstance(model, torch.nn.Module):
        raise ValueError(f"'{path}' holds a {type(model).__name__}, not a torch.nn.Module (a state dict needs its model "
                         "class: pass 'package.module:function' returning the model instead)")
    return model


def _report(float_model: Any, quantized_model: Any, repr_dataset: Callable, validation_dataset: Callable,
            xquant_config: Any, troubleshoot: bool):
    from hwquant.torch.deployment.metadata import read_metadata
    return run_report(lambda settings: TorchXQuantBackend(float_model, quantized_model, repr_dataset, settings),
                      read_metadata(quantized_model) or {}, repr_dataset, validation_dataset, xquant_config,
                      troubleshoot)


@framework_call
def xquant_report_pytorch_experimental(float_model: Any, quantized_model: Any, repr_dataset: Callable[[], Any],
                                       validation_dataset: Callable[[], Any], xquant_config: XQuantConfig):
    """MCT's report: the similarity of the quantized model to the float model, at its output and at every
    quantized layer, on both datasets (a dictionary with MCT's keys), written with hwquant's report.html,
    report.json and the fixes it measured into ``xquant_config.report_dir``."""
    return _report(float_model, quantized_model, repr_dataset, validation_dataset, xquant_config, False)[0]


@framework_call
def xquant_report_troubleshoot_pytorch_experimental(float_model: Any, quantized_model: Any,
                                                    repr_dataset: Callable[[], Any],
                                                    validation_dataset: Callable[[], Any],
                                                    xquant_config: XQuantConfig):
    """MCT's troubleshooting report: (the similarity dictionary, the judged causes of the degraded layers)."""
    return _report(float_model, quantized_model, repr_dataset, validation_dataset, xquant_config, True)
