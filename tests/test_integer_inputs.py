"""Integer and boolean tensors (token ids, attention masks, indices) are never quantized: BERT-style
encoders, hand-written and from the transformers library, quantize and run."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hwquant as mct
from hwquant.torch.quantizers import PytorchActivationQuantizationHolder

VOCAB, T = 100, 16


class TinyBert(nn.Module):
    """Token, position and segment embeddings, LayerNorm, masked softmax attention, GELU MLP, pooler."""

    def __init__(self, d=32, heads=4, layers=2):
        super().__init__()
        self.heads = heads
        self.tok, self.pos, self.seg = nn.Embedding(VOCAB, d), nn.Embedding(T, d), nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d)
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(
            q=nn.Linear(d, d), k=nn.Linear(d, d), v=nn.Linear(d, d), o=nn.Linear(d, d), ln1=nn.LayerNorm(d),
            f1=nn.Linear(d, 4 * d), f2=nn.Linear(4 * d, d), ln2=nn.LayerNorm(d))) for _ in range(layers))
        self.pool = nn.Linear(d, d)

    def forward(self, ids, mask):
        n, t = ids.shape
        positions = torch.arange(t, device=ids.device).unsqueeze(0)
        x = self.ln(self.tok(ids) + self.pos(positions) + self.seg(torch.zeros_like(ids)))
        bias = (1.0 - mask[:, None, None, :].to(x.dtype)) * -10000.0
        for b in self.blocks:
            d = x.shape[-1]
            q, k, v = (b[name](x).view(n, t, self.heads, d // self.heads).transpose(1, 2) for name in "qkv")
            attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + bias, dim=-1)
            x = b["ln1"](x + b["o"]((attn @ v).transpose(1, 2).reshape(n, t, d)))
            x = b["ln2"](x + b["f2"](F.gelu(b["f1"](x))))
        return torch.tanh(self.pool(x[:, 0]))


def _batches(n=4, batch=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, VOCAB, (batch, T), generator=g)
        mask = torch.ones(batch, T, dtype=torch.long)
        mask[:, 12:] = 0
        out.append([ids, mask])
    return out


def _sqnr(f, q):
    return 10 * math.log10(f.pow(2).mean() / (f - q).pow(2).mean())


def _check(model):
    torch.manual_seed(0)
    data = _batches()
    q, _ = mct.ptq.pytorch_post_training_quantization(model.eval(), lambda: iter(data))
    ids, mask = _batches(seed=1)[0]
    with torch.no_grad():
        f, out = model(ids, mask), q(ids, mask)
    assert _sqnr(f, out) > 20
    # the integer inputs reach their readers as they are: no holder on them
    placeholders = [n for n in q.graph.nodes if n.op == "placeholder"]
    for p in placeholders:
        assert not any(u.op == "call_module" and isinstance(q.get_submodule(u.target), PytorchActivationQuantizationHolder)
                       for u in p.users), f"input {p.name} is quantized"
    return q


def test_hand_written_bert_quantizes_and_runs():
    _check(TinyBert())


def test_transformers_bert_quantizes_and_runs():
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=T)
    torch.manual_seed(0)
    bert = transformers.BertModel(config).eval()

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, ids, mask):
            return self.bert(input_ids=ids, attention_mask=mask).last_hidden_state

    _check(Encoder())


def test_boolean_and_index_tensors_inside_the_graph_stay_unquantized():
    class Gathering(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x):
            keep = x > 0                       # bool
            idx = x.abs().argmax(dim=-1)       # int64
            y = self.fc(torch.where(keep, x, torch.zeros_like(x)))
            return y.gather(-1, idx.unsqueeze(-1))

    data = [[torch.randn(4, 8)] for _ in range(3)]
    model = Gathering().eval()
    q, _ = mct.ptq.pytorch_post_training_quantization(model, lambda: iter(data))
    x = torch.randn(5, 8)
    assert q(x).shape == model(x).shape
    quantized = {n.args[0].name for n in q.graph.nodes if n.op == "call_module"
                 and isinstance(q.get_submodule(n.target), PytorchActivationQuantizationHolder)}
    assert not any(name.startswith(("gt", "argmax")) for name in quantized), quantized


class MinMaskBert(TinyBert):
    """Masks as transformers writes them: the float32 minimum (or -inf) added to the scores."""

    def __init__(self, fill):
        super().__init__()
        self.fill = fill

    def forward(self, ids, mask):
        n, t = ids.shape
        x = self.ln(self.tok(ids) + self.pos(torch.arange(t).unsqueeze(0)))
        bias = torch.zeros(n, 1, 1, t).masked_fill(mask[:, None, None, :] == 0, self.fill)
        for b in self.blocks:
            d = x.shape[-1]
            q, k, v = (b[name](x).view(n, t, self.heads, d // self.heads).transpose(1, 2) for name in "qkv")
            attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // self.heads) + bias, dim=-1)
            x = b["ln1"](x + b["o"]((attn @ v).transpose(1, 2).reshape(n, t, d)))
        return x[:, 0]


@pytest.mark.parametrize("fill", [torch.finfo(torch.float32).min, float("-inf")], ids=["finfo.min", "-inf"])
def test_attention_masks_stay_float_and_keep_masking(fill, caplog):
    import logging
    with caplog.at_level(logging.INFO, logger="hwquant.pipeline"):
        _check(MinMaskBert(fill))  # the scores' grid would otherwise span the mask value: every score 0
    assert "kept float (they hold masking values" in caplog.text
