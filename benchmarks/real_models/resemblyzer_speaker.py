"""Resemblyzer's GE2E speaker encoder: a 3-layer LSTM over 40-band mel frames of synthetic voiced speech, a
unit-norm 256-d embedding. Weights: pretrained.pt of PyPI resemblyzer 0.1.4."""
from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from .common import RealModel, _finish, _need, _torch_load
from .speech import SR, synth_speaker, synth_utterance


N_FFT, HOP, N_MELS, PARTIAL_FRAMES = 400, 160, 40, 160  # 25 ms window, 10 ms hop, 1.6 s partials


class SpeakerEncoderLSTM(nn.Module):
    """(B, frames, 40) mel power frames -> (B, 256) unit-norm speaker embedding."""

    def __init__(self, n_mels: int = N_MELS, hidden: int = 256, layers: int = 3, emb: int = 256):
        super().__init__()
        self.lstm = nn.LSTM(n_mels, hidden, layers, batch_first=True)
        self.linear = nn.Linear(hidden, emb)
        self.relu = nn.ReLU()

    def forward(self, mels: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(mels)
        e = self.relu(self.linear(h[-1]))
        return e / e.norm(dim=1, keepdim=True).clamp_min(1e-8)


def _mel_filterbank(sr: int = SR, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """Slaney-style mel filters with area normalisation (librosa's default), (n_mels, 1 + n_fft/2)."""
    f_sp, min_log_hz, logstep = 200.0 / 3, 1000.0, math.log(6.4) / 27.0
    min_log_mel = min_log_hz / f_sp

    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, f / f_sp)

    def mel_to_hz(m):
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)

    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sr / 2), n_mels + 2))
    fft_f = np.linspace(0, sr / 2, 1 + n_fft // 2)
    ramps = mel_f[:, None] - fft_f[None, :]
    fdiff = np.diff(mel_f)
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (mel_f[2:] - mel_f[:-2]))[:, None]
    return weights.astype(np.float32)


def wav_to_mel_frames(wav: np.ndarray) -> np.ndarray:
    """Resemblyzer's features: volume-normalised (-30 dBFS, raise only) wav -> (frames, 40) mel power."""
    wav = wav.astype(np.float64)
    gain_db = -30.0 - 10 * np.log10(np.mean(wav ** 2) + 1e-12)
    if gain_db > 0:
        wav = wav * 10 ** (gain_db / 20)
    padded = np.pad(wav, N_FFT // 2, mode="reflect")
    n_frames = 1 + (len(padded) - N_FFT) // HOP
    idx = np.arange(N_FFT)[None, :] + HOP * np.arange(n_frames)[:, None]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic Hann
    power = np.abs(np.fft.rfft(padded[idx] * window, axis=1)) ** 2
    return (power @ _mel_filterbank().T).astype(np.float32)


def speaker_inputs(n: int, seed: int, utts_per_speaker: int = 3) -> tuple[torch.Tensor, list[int]]:
    """n partial utterances (1.6 s) from ceil(n / utts_per_speaker) synthetic speakers."""
    rng = np.random.default_rng(seed)
    speakers, mels, ids = [], [], []
    for i in range(n):
        if i % utts_per_speaker == 0:
            speakers.append(synth_speaker(rng))
        frames = wav_to_mel_frames(synth_utterance(speakers[-1], rng))
        mels.append(torch.from_numpy(frames[:PARTIAL_FRAMES]))
        ids.append(len(speakers) - 1)
    return torch.stack(mels), ids


def load_resemblyzer() -> RealModel:
    ckpt = _torch_load(_need("resemblyzer/resemblyzer/pretrained.pt"))
    sd = dict(ckpt["model_state"])
    for k in ("similarity_weight", "similarity_bias"):  # GE2E loss scale/offset, training only
        sd.pop(k)
    model = _finish(SpeakerEncoderLSTM(), sd)
    return RealModel(model, lambda n, seed=0: [speaker_inputs(n, seed)[0]],
                     "Resemblyzer GE2E speaker encoder (3-layer LSTM 256 + linear) on 160x40 mel frames "
                     "of synthetic voiced speech; PyPI resemblyzer 0.1.4",
                     "embedding cosine")
