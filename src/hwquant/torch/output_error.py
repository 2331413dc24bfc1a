"""How far a quantized model's outputs are from the float model's: squared error over the float
outputs' energy (integer outputs are left out). Used to decide between alternatives on the
representative data (whether bias correction helps; GPTQ's two bias corrections)."""
from __future__ import annotations

from typing import Any, Iterable, List, Sequence

import torch


def flat_tensors(structure: Any) -> List[torch.Tensor]:
    """The tensors of a model output (a tensor, or lists / tuples / dicts of them), in order."""
    if isinstance(structure, torch.Tensor):
        return [structure]
    if isinstance(structure, dict):
        structure = list(structure.values())
    if isinstance(structure, (list, tuple)):
        return [t for s in structure for t in flat_tensors(s)]
    return []


def error_and_energy(outputs: Sequence[torch.Tensor], targets: Sequence[torch.Tensor]) -> tuple:
    """(sum of squared errors, sum of squared targets) over the float tensors, in float64."""
    err = energy = 0.0
    for q, f in zip(outputs, targets):
        if f.is_floating_point():
            err += float((q.double() - f.double()).pow(2).sum())
            energy += float(f.double().pow(2).sum())
    return err, energy


@torch.no_grad()
def relative_output_errors(reference: torch.nn.Module, models: Sequence[torch.nn.Module],
                           batches: Iterable[List[torch.Tensor]], max_samples: int) -> List[float]:
    """Each model's squared output error against ``reference`` over the reference's output energy,
    on the batches (whole batches until ``max_samples`` samples are reached)."""
    errors, energy, seen = [0.0] * len(models), 0.0, 0
    for batch in batches:
        targets = flat_tensors(reference(*batch))
        for i, model in enumerate(models):
            err, batch_energy = error_and_energy(flat_tensors(model(*batch)), targets)
            errors[i] += err
        energy += batch_energy if models else 0.0
        seen += len(batch[0])
        if seen >= max_samples:
            break
    return [err / max(energy, 1e-30) for err in errors]
