"""`mct.qat` for PyTorch: build a trainable quantized model from PTQ, and finalize it after training."""
from __future__ import annotations

import inspect
import logging
import time
from typing import Any, Callable, Dict, Optional, Tuple

from torch import nn

from hwquant.core.config import CoreConfig, ResourceUtilization, UserInformation
from hwquant.core.graph import Graph, Node
from hwquant.core.model_metadata import quantization_metadata
from hwquant.errors import InvalidConfigError
from hwquant.ptq import DEFAULT_PYTORCH_TPC, run_pytorch_ptq, user_information
from hwquant.qat.config import QATConfig
from hwquant.torch.metadata import attach_metadata
from hwquant.torch.trainable_model import TrainableQuantizerFactory, build_trainable_model, convert_to_inferable
from hwquant.trainable_infrastructure.common import QuantizationTarget, get_trainable_quantizer_class
from hwquant.trainable_infrastructure.node_configs import trainable_activation_config, trainable_weights_config
from hwquant.trainable_infrastructure.pytorch import BasePytorchTrainableQuantizer

log = logging.getLogger("hwquant.qat")


def pytorch_quantization_aware_training_init_experimental(
        in_model: Any, representative_data_gen: Callable[[], Any],
        target_resource_utilization: Optional[ResourceUtilization] = None, core_config: CoreConfig = CoreConfig(),
        qat_config: QATConfig = QATConfig(), target_platform_capabilities: Any = DEFAULT_PYTORCH_TPC
) -> Tuple[nn.Module, UserInformation]:
    """Quantize ``in_model`` with post-training quantization, then make its quantizers trainable.

    Every quantized layer's kernel gets a trainable weight quantizer and every quantized activation a
    trainable activation quantizer (``qat_config`` picks STE or LSQ), initialised with the PTQ
    parameters: before training, the model in eval mode gives bitwise the PTQ model's outputs.

    Returns:
        (model, UserInformation). The model is a plain ``nn.Module`` (a torch.fx GraphModule) in
        training mode: train it with your own loop, optimizer, ``state_dict`` checkpoints or
        DistributedDataParallel; ``model.eval()`` simulates the deployed integer model. Then call
        :func:`pytorch_quantization_aware_training_finalize_experimental`.
    """
    if not isinstance(qat_config, QATConfig):
        raise InvalidConfigError(f"qat_config must be a QATConfig, got {type(qat_config).__name__}")
    start = time.perf_counter()
    session, state = run_pytorch_ptq(in_model, representative_data_gen, target_resource_utilization, core_config,
                                     target_platform_capabilities)
    adapter = session.adapter
    weights, activations = _quantizer_classes(state.graph, adapter.kernel_attr, qat_config)
    w_kwargs, a_kwargs = qat_config.weight_quantizer_params_override, qat_config.activation_quantizer_params_override
    factory = TrainableQuantizerFactory(
        adapter.kernel_attr,
        lambda node, attr: weights[node.name](trainable_weights_config(node, attr), **w_kwargs),
        lambda node: activations[node.name](trainable_activation_config(node), **a_kwargs))
    model = build_trainable_model(state.graph, factory, adapter.device)
    attach_metadata(model, quantization_metadata(session.state.tpc, core_config, "pytorch", "qat"))
    log.info("QAT model of %s ready in %.1f s (%d trainable weight quantizers, %d activation quantizers)",
             state.graph.name, time.perf_counter() - start, len(weights), len(activations))
    return model, user_information(state, adapter)


def pytorch_quantization_aware_training_finalize_experimental(in_model: nn.Module) -> nn.Module:
    """Turn a trained QAT model into the inferable quantized model, in place (and return it, in eval
    mode): each trainable quantizer becomes the fixed quantizer of its learned grid, so the result
    gives bitwise the trained model's eval-mode outputs and exports like any PTQ model."""
    return convert_to_inferable(in_model).eval()


def _quantizer_classes(graph: Graph, kernel_attr: Callable[[Node], Optional[str]],
                       qat_config: QATConfig) -> Tuple[Dict[str, type], Dict[str, type]]:
    """The trainable quantizer class of each quantized kernel and activation, checked up front
    (with the constructor overrides) so that one error names every node that cannot be trained."""
    weights, activations, problems = {}, {}, []
    for node in graph:
        cfg = node.final_config
        if cfg is None:
            continue
        attr = kernel_attr(node)
        wc = cfg.weights_quantization_cfg.attrs.get(attr) if attr is not None else None
        if wc is not None and wc.enable_weights_quantization and attr in node.weights:
            try:
                weights[node.name] = get_trainable_quantizer_class(
                    QuantizationTarget.Weights, qat_config.weight_training_method, wc.weights_quantization_method,
                    BasePytorchTrainableQuantizer)
            except InvalidConfigError as e:
                problems.append(f"'{node.name}' kernel: {e}")
        if cfg.activation_quantization_cfg.quantized:
            try:
                activations[node.name] = get_trainable_quantizer_class(
                    QuantizationTarget.Activation, qat_config.activation_training_method,
                    cfg.activation_quantization_cfg.activation_quantization_method, BasePytorchTrainableQuantizer)
            except InvalidConfigError as e:
                problems.append(f"'{node.name}' activation: {e}")
    if problems:
        raise InvalidConfigError("quantization-aware training cannot train every quantizer:\n  " + "\n  ".join(problems))
    for which, classes, override in (("weight", weights, qat_config.weight_quantizer_params_override),
                                     ("activation", activations, qat_config.activation_quantizer_params_override)):
        for cls in set(classes.values()):
            accepted = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "quantization_config")]
            unknown = sorted(set(override) - set(accepted))
            if unknown:
                raise InvalidConfigError(f"{which}_quantizer_params_override has {unknown}, which {cls.__name__} does "
                                         f"not take; it accepts {accepted}")
    return weights, activations
