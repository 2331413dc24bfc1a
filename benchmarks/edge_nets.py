"""Small networks with the blocks edge models are built from, for the IMX500 converter benchmark:
residual adds, concatenation, hard-swish with squeeze-excite, and a transformer encoder with GELU.
Weights are seeded and batch-norm statistics randomised (the converter's verdict and memory report
depend on the architecture and the bit widths, not on trained values). Only torch is imported, so
MCT's virtualenv builds the same models.
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


def _conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout))


class Fire(nn.Module):
    """SqueezeNet's fire module: squeeze 1x1, then 1x1 and 3x3 expansions concatenated."""

    def __init__(self, cin: int, squeeze: int, expand: int):
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
        self.e1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU())
        self.e3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU())

    def forward(self, x):
        s = self.squeeze(x)
        return torch.cat([self.e1(s), self.e3(s)], dim=1)


class ConcatResidualNet(nn.Module):
    """Fire modules (concatenation) with residual adds between equal shapes, max pooling, a linear head."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 32, stride=2), nn.ReLU())
        self.fire1, self.fire2 = Fire(32, 16, 32), Fire(64, 16, 32)
        self.fire3, self.fire4 = Fire(64, 32, 64), Fire(128, 32, 64)
        self.head = nn.Linear(128, classes)

    def forward(self, x):
        x = self.stem(x)
        x = self.fire1(x)
        x = x + self.fire2(x)
        x = F.max_pool2d(x, 2)
        x = self.fire3(x)
        x = x + self.fire4(x)
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class SqueezeExcite(nn.Module):
    def __init__(self, channels: int, reduced: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(channels, reduced, 1), nn.Conv2d(reduced, channels, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        return x * F.hardsigmoid(self.fc2(F.relu(self.fc1(s))))


class HSwishBlock(nn.Module):
    """MobileNetV3's inverted residual: expand, depthwise, squeeze-excite, project, hard-swish."""

    def __init__(self, cin: int, hidden: int, cout: int, stride: int):
        super().__init__()
        self.expand = nn.Sequential(_conv_bn(cin, hidden, 1), nn.Hardswish())
        self.dw = nn.Sequential(_conv_bn(hidden, hidden, 3, stride, groups=hidden), nn.Hardswish())
        self.se = SqueezeExcite(hidden, max(8, hidden // 4))
        self.project = _conv_bn(hidden, cout, 1)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.residual else y


class HSwishSENet(nn.Module):
    """A MobileNetV3-small-like network: hard-swish, squeeze-excite with hard-sigmoid, residual adds."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 16, stride=2), nn.Hardswish())
        self.blocks = nn.Sequential(HSwishBlock(16, 64, 24, 2), HSwishBlock(24, 96, 24, 1),
                                    HSwishBlock(24, 96, 40, 2), HSwishBlock(40, 160, 40, 1))
        self.last = nn.Sequential(_conv_bn(40, 160, 1), nn.Hardswish())
        self.head = nn.Sequential(nn.Linear(160, 256), nn.Hardswish(), nn.Linear(256, classes))

    def forward(self, x):
        x = self.last(self.blocks(self.stem(x)))
        return self.head(F.adaptive_avg_pool2d(x, 1).flatten(1))


class EncoderBlock(nn.Module):
    """Pre-norm transformer encoder block: multi-head softmax attention and a GELU MLP, on (N, T, D)."""

    def __init__(self, dim: int, heads: int, mlp: int, tokens: int = 0):
        super().__init__()
        self.heads, self.tokens, self.dim = heads, tokens, dim
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.act, self.fc2 = nn.Linear(dim, mlp), nn.GELU(), nn.Linear(mlp, dim)

    def forward(self, x):
        # sizes read from the input, or constants (tokens > 0) for tools that cannot trace x.shape
        n, t, d = x.shape if not self.tokens else (-1, self.tokens, self.dim)
        dh = d // self.heads
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (z.reshape(n, t, self.heads, dh).transpose(1, 2) for z in (q, k, v))
        attn = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(dh), dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(n, t, d))
        return x + self.fc2(self.act(self.fc1(self.ln2(x))))


class TinyViT(nn.Module):
    """A small vision transformer: 4x4 patches embedded by a convolution, two encoder blocks, mean pooling."""

    def __init__(self, classes: int = 10, dim: int = 64, heads: int = 4, depth: int = 2, static_tokens: int = 0):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, 4)
        self.blocks = nn.Sequential(*[EncoderBlock(dim, heads, 4 * dim, static_tokens) for _ in range(depth)])
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)   # (N, tokens, dim)
        x = self.norm(self.blocks(x))
        return self.head(x.mean(dim=1))


class TinyViTStatic(TinyViT):
    """TinyViT with its token count written as a constant (MCT 2.6.1 fails on sizes read from x.shape)."""

    def __init__(self, classes: int = 10):
        super().__init__(classes, static_tokens=64)


# name: (class, input shape without the batch)
EDGE_NETS = {
    "concat_residual_net": (ConcatResidualNet, (3, 64, 64)),
    "hswish_se_net": (HSwishSENet, (3, 64, 64)),
    "tiny_vit": (TinyViT, (3, 32, 32)),
    "tiny_vit_static": (TinyViTStatic, (3, 32, 32)),
}


def build_edge_net(name: str) -> nn.Module:
    cls, _ = EDGE_NETS[name]
    torch.manual_seed(0)
    model = cls().eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
    return model
