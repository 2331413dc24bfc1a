"""Synthetic voiced speech (16 kHz), the audio input of the Resemblyzer, Silero VAD and CREPE families: a harmonic
source at a wandering pitch shaped by vowel formants, with noise bursts and room noise."""
from __future__ import annotations

import numpy as np


SR = 16000


# Vowel formants (F1, F2, F3 in Hz, adult male) for the synthetic voices.
_VOWELS = np.array([[730, 1090, 2440], [530, 1840, 2480], [270, 2290, 3010], [570, 840, 2410],
                    [300, 870, 2240], [660, 1720, 2410], [490, 1350, 1690], [640, 1190, 2390]], dtype=np.float64)


def synth_speaker(rng: np.random.Generator) -> dict:
    female = rng.uniform() < 0.5
    return {"f0": rng.uniform(170, 250) if female else rng.uniform(85, 140),
            "vtl": rng.uniform(1.08, 1.22) if female else rng.uniform(0.88, 1.02),  # formant scaling
            "tilt": rng.uniform(0.8, 1.6), "breath": rng.uniform(0.01, 0.08),
            "bw": rng.uniform(60, 120)}


def synth_utterance(spk: dict, rng: np.random.Generator, seconds: float = 1.7) -> np.ndarray:
    """Voiced speech-like waveform: a harmonic source at a wandering pitch shaped by a moving
    formant envelope (a sequence of vowel-like syllables), plus noise bursts and room noise."""
    n = int(seconds * SR)
    t = np.arange(n) / SR
    # syllables: random vowels, 110-260 ms, with short gaps
    bounds, pos = [], 0
    while pos < n:
        d = int(rng.uniform(0.11, 0.26) * SR)
        bounds.append((pos, min(n, pos + d), int(rng.integers(0, len(_VOWELS)))))
        pos += d + int(rng.uniform(0.0, 0.06) * SR)
    formants = np.zeros((n, 3))
    amp = np.zeros(n)
    for s, e, v in bounds:
        formants[s:e] = _VOWELS[v] * spk["vtl"]
        ramp = np.sin(np.pi * np.linspace(0, 1, e - s)) ** 0.6
        amp[s:e] = ramp * rng.uniform(0.6, 1.0)
    last = formants[0]
    for i in range(n):  # hold formants through the gaps so the envelope stays defined
        if formants[i, 0] == 0:
            formants[i] = last
        else:
            last = formants[i]
    kernel = np.hanning(int(0.02 * SR))
    kernel /= kernel.sum()
    formants = np.stack([np.convolve(formants[:, j], kernel, mode="same") for j in range(3)], 1)
    f0 = spk["f0"] * (1 + 0.08 * np.sin(2 * np.pi * rng.uniform(0.5, 2.0) * t + rng.uniform(0, 6.28))
                      + 0.01 * np.cumsum(rng.normal(0, 0.01, n)) / np.sqrt(np.arange(1, n + 1)))
    phase = 2 * np.pi * np.cumsum(f0) / SR
    wav = np.zeros(n)
    for k in range(1, int(7000 / spk["f0"]) + 1):
        fk = k * f0
        env = sum(1.0 / (1 + ((fk - formants[:, j]) / (spk["bw"] * (1 + j))) ** 2) / (1 + j)
                  for j in range(3))
        wav += np.where(fk < 7600, env * k ** (-spk["tilt"]), 0.0) * np.sin(k * phase)
    wav = wav * amp
    wav += spk["breath"] * rng.normal(0, 1, n) * amp * np.abs(wav).max()
    for s, _e, _ in bounds:  # fricative-like noise burst before some syllables
        if rng.uniform() < 0.4 and s > 800:
            burst = rng.normal(0, 1, 800) * np.hanning(800) * 0.3 * np.abs(wav).max()
            wav[s - 800:s] += np.diff(np.concatenate([[0], burst]))
    wav += rng.normal(0, 1e-3, n)
    return (0.5 * wav / np.abs(wav).max()).astype(np.float32)
