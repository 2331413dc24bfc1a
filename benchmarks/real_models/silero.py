"""Silero VAD (v6, its 16 kHz branch): an STFT front end (a conv1d with a fixed Fourier basis, magnitude
sqrt(re^2 + im^2)), four conv1d blocks and an LSTM cell over 8 chunks of 32 ms, fed synthetic speech, speech
after / before silence, and noise. Weights: the TorchScript file data/silero_vad.jit of PyPI silero-vad 6.2.3."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .common import RealModel, _finish, _need
from .speech import synth_speaker, synth_utterance


SILERO_JIT = "silero-vad/silero_vad/data/silero_vad.jit"
SILERO_CHUNK, SILERO_CONTEXT, SILERO_CHUNKS = 512, 64, 8  # samples; each chunk sees 64 before it


class _SileroSTFT(nn.Module):
    """Magnitude spectrum: reflect-pad 64 right, a strided conv1d with the (real; imag) Fourier
    basis (258 x 1 x 256, hop 128), then sqrt(re^2 + im^2) over the 129 bins."""

    def __init__(self):
        super().__init__()
        self.register_buffer("forward_basis_buffer", torch.zeros(258, 1, 256))

    def forward(self, x):
        x = F.pad(x, (0, 64), mode="reflect").unsqueeze(1)
        spec = F.conv1d(x, self.forward_basis_buffer, stride=128)
        re, im = spec[:, :129], spec[:, 129:]
        return torch.sqrt(re * re + im * im)


class _SileroBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.reparam_conv = nn.Conv1d(cin, cout, 3, stride=stride, padding=1)
        self.activation = nn.ReLU()

    def forward(self, x):
        return self.activation(self.reparam_conv(x))


class _SileroDecoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTMCell(128, 128)
        self.decoder = nn.Sequential(nn.Dropout(0.1), nn.ReLU(), nn.Conv1d(128, 1, 1), nn.Sigmoid())


class SileroVAD(nn.Module):
    """(B, 64 + 8 * 512) audio at 16 kHz -> (B, 8) speech probability of each 32 ms chunk, the LSTM
    state carried from chunk to chunk (the 16 kHz branch of the shipped TorchScript model, unrolled
    over a fixed number of chunks)."""

    def __init__(self, chunks: int = SILERO_CHUNKS):
        super().__init__()
        self.chunks = chunks
        self.stft = _SileroSTFT()
        self.encoder = nn.Sequential(_SileroBlock(129, 128, 1), _SileroBlock(128, 64, 2),
                                     _SileroBlock(64, 64, 2), _SileroBlock(64, 128, 1))
        self.decoder = _SileroDecoder()

    def forward(self, audio):
        state, probs = None, []
        for i in range(self.chunks):
            chunk = audio[:, i * SILERO_CHUNK: i * SILERO_CHUNK + SILERO_CONTEXT + SILERO_CHUNK]
            feats = self.encoder(self.stft(chunk)).squeeze(-1)
            state = self.decoder.rnn(feats, state)
            p = self.decoder.decoder(state[0].unsqueeze(-1))  # (B, 1, 1)
            probs.append(p.flatten(1))
        return torch.cat(probs, 1)


def vad_audio(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n clips of 64 + 8 * 512 samples: a third synthetic speech, a third speech starting or ending
    mid-clip after silence, a third background noise only (white or brown, -60 to -25 dBFS).
    Returns (audio, per-chunk speech flag of the construction)."""
    rng = np.random.default_rng(seed)
    length = SILERO_CONTEXT + SILERO_CHUNKS * SILERO_CHUNK
    clips, flags = [], []
    for i in range(n):
        kind = i % 3
        noise = rng.normal(0, 1, length)
        if rng.uniform() < 0.5:
            noise = np.cumsum(noise)
            noise -= noise.mean()
        noise *= 10 ** (rng.uniform(-60, -25) / 20) / (noise.std() + 1e-12)
        speech = np.zeros(length)
        flag = np.zeros(SILERO_CHUNKS)
        if kind < 2:
            utt = synth_utterance(synth_speaker(rng), rng, seconds=0.5)
            start = int(rng.integers(0, len(utt) - length))
            speech = utt[start:start + length].astype(np.float64) * rng.uniform(0.3, 1.0)
            flag[:] = 1
            if kind == 1:  # silence for a random part of the clip, before or after the speech
                cut = int(rng.integers(2, SILERO_CHUNKS - 1))
                if rng.uniform() < 0.5:
                    speech[:SILERO_CONTEXT + cut * SILERO_CHUNK] = 0
                    flag[:cut] = 0
                else:
                    speech[SILERO_CONTEXT + cut * SILERO_CHUNK:] = 0
                    flag[cut:] = 0
        clips.append(torch.from_numpy((speech + noise).astype(np.float32)))
        flags.append(torch.from_numpy(flag))
    return torch.stack(clips), torch.stack(flags)


def load_silero_vad() -> RealModel:
    jit = torch.jit.load(str(_need(SILERO_JIT)), map_location="cpu")  # TorchScript: no pickle
    sd = {k[len("_model."):]: v for k, v in jit.state_dict().items() if k.startswith("_model.")}
    model = _finish(SileroVAD(), sd)
    return RealModel(model, lambda n, seed=0: [vad_audio(n, seed)[0]],
                     "Silero VAD v6 (16 kHz branch): STFT as conv1d + magnitude, 4 conv1d blocks, "
                     "LSTM cell over 8 chunks of 32 ms; PyPI silero-vad 6.2.3",
                     "speech-decision agreement")
