"""`mct.qat` for PyTorch: build a trainable quantized model from PTQ, and finalize it after training."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Optional, Tuple

from torch import nn

from hwquant.concurrency import framework_call
from hwquant.core.configuration.config import CoreConfig, ResourceUtilization, UserInformation
from hwquant.core.pipeline.facade_steps import user_information
from hwquant.core.pipeline.model_metadata import quantization_metadata
from hwquant.errors import InvalidConfigError
from hwquant.qat.config import QATConfig
from hwquant.torch.facade import DEFAULT_PYTORCH_TPC, run_pytorch_ptq
from hwquant.torch.deployment.metadata import attach_metadata
from hwquant.torch.trainable import BasePytorchTrainableQuantizer
from hwquant.torch.trainable.model import (TrainableQuantizerFactory, build_trainable_model, convert_to_inferable,
                                           copy_model, trainable_quantizers)
from hwquant.trainable_infrastructure.node_configs import QATQuantizers

log = logging.getLogger("hwquant.qat")


@framework_call
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
    quantizers = QATQuantizers(state.graph, adapter.kernel_attr, qat_config, BasePytorchTrainableQuantizer)
    factory = TrainableQuantizerFactory(adapter.kernel_attr, quantizers.weights, quantizers.activation)
    model = build_trainable_model(state.graph, factory, adapter.device)
    attach_metadata(model, quantization_metadata(session.state.tpc, core_config, "pytorch", "qat"))
    log.info("QAT model of %s ready in %.1f s (%s)", state.graph.name, time.perf_counter() - start, quantizers)
    return model, user_information(state, adapter)


def _refuse_sharded(model: Any) -> None:
    """A model sharded by FSDP holds a shard of each variable: finalizing needs the whole model."""
    from torch.distributed.tensor import DTensor

    if isinstance(model, nn.Module) and any(isinstance(p, DTensor) for p in model.parameters()):
        raise InvalidConfigError(
            "the model is sharded (FSDP's fully_shard: its parameters are DTensors), and finalizing needs every "
            "variable whole. Keep an unsharded copy made before fully_shard (skeleton = copy.deepcopy(qat_model)), "
            "then on every rank: full = torch.distributed.checkpoint.state_dict.get_model_state_dict(model, "
            "options=StateDictOptions(full_state_dict=True)); skeleton.load_state_dict(full); and finalize the "
            "skeleton (docs/guide/distributed.md)")


@framework_call
def pytorch_quantization_aware_training_finalize_experimental(in_model: nn.Module) -> nn.Module:
    """The inferable quantized model of a trained QAT model, in eval mode: each trainable quantizer
    becomes the fixed quantizer of its learned grid, so the result gives bitwise the trained model's
    eval-mode outputs and exports like any PTQ model. ``in_model`` is left as it is (a copy is
    converted, as MCT does): training can go on after finalizing at an intermediate epoch, and
    finalizing it again gives the same model."""
    _refuse_sharded(in_model)
    if isinstance(in_model, nn.Module) and next(trainable_quantizers(in_model), None) is None:
        convert_to_inferable(in_model)  # (says why, before a copy is made)
    return convert_to_inferable(copy_model(in_model) if isinstance(in_model, nn.Module) else in_model).eval()
