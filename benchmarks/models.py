"""Reference models for the benchmarks and the demo: MobileNetV2 with real ImageNet weights, and two
small Fashion-MNIST CNNs trained here once, deterministically, then cached under .cache/models/.

Only torch is imported at module level: peer runners import this file from their own virtualenv
(.venv-mct), which has no PIL/skimage requirement for the model definitions.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parents[1]
MODEL_CACHE = ROOT / ".cache" / "models"


# ---------------------------------------------------------------------------------------------
# MobileNetV2: written here (no torchvision dependency) with torchvision's exact module names,
# so torchvision's state dict loads with strict=True.
# ---------------------------------------------------------------------------------------------
def _make_divisible(v: float, divisor: int = 8) -> int:
    new_v = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new_v + divisor if new_v < 0.9 * v else new_v


class ConvBNReLU6(nn.Sequential):
    """Same layout as torchvision's Conv2dNormActivation: children 0 conv, 1 bn, 2 ReLU6."""

    def __init__(self, cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1):
        super().__init__(
            nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(inplace=True),
        )


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = int(round(cin * expand_ratio))
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(cin, hidden, kernel=1))                  # pointwise expand
        layers += [
            ConvBNReLU6(hidden, hidden, stride=stride, groups=hidden),          # depthwise
            nn.Conv2d(hidden, cout, 1, 1, 0, bias=False),                       # pointwise linear
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)
        self.out_channels = cout

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    # t (expansion), c (channels), n (repeats), s (stride of the first repeat)
    SETTINGS = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]

    def __init__(self, num_classes: int = 1000, width_mult: float = 1.0, dropout: float = 0.2):
        super().__init__()
        cin = _make_divisible(32 * width_mult)
        self.last_channel = _make_divisible(1280 * max(1.0, width_mult))
        features: list[nn.Module] = [ConvBNReLU6(3, cin, stride=2)]
        for t, c, n, s in self.SETTINGS:
            cout = _make_divisible(c * width_mult)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(ConvBNReLU6(cin, self.last_channel, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(self.last_channel, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = F.adaptive_avg_pool2d(x, 1)
        x = torch.flatten(x, 1)
        return self.classifier(x)


def mobilenet_v2_pretrained(weights_path: str | Path | None = None) -> MobileNetV2:
    """MobileNetV2 with torchvision's real ImageNet weights, in eval mode."""
    if weights_path is None:
        from benchmarks.assets import mobilenet_v2_weights_path
        weights_path = mobilenet_v2_weights_path()
    model = MobileNetV2()
    model.load_state_dict(torch.load(weights_path, map_location="cpu", weights_only=True), strict=True)
    return model.eval()


# ---------------------------------------------------------------------------------------------
# Fashion-MNIST CNNs (input 1 x 28 x 28, standardised as in benchmarks.assets.fashion_mnist)
# ---------------------------------------------------------------------------------------------
class PlainCNN(nn.Module):
    """conv-bn-relu x3 with max pooling and a linear head: the 'easy' quantization case."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),                                                     # 14 x 14
            nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),                                                     # 7 x 7
            nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        )
        self.classifier = nn.Linear(64 * 7 * 7, num_classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


class MobileStyleCNN(nn.Module):
    """Depthwise-separable convs, BN, ReLU6 and inverted residuals with residual adds: the
    patterns that make MobileNet-class models hard to quantize, at Fashion-MNIST size."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = ConvBNReLU6(1, 16)                                          # 28 x 28
        self.blocks = nn.Sequential(
            InvertedResidual(16, 16, 1, 1),    # depthwise + pointwise-linear, residual add
            InvertedResidual(16, 24, 2, 4),    # 14 x 14
            InvertedResidual(24, 24, 1, 4),    # residual add
            InvertedResidual(24, 32, 2, 4),    # 7 x 7
            InvertedResidual(32, 32, 1, 4),    # residual add
        )
        self.head = ConvBNReLU6(32, 128, kernel=1)
        self.classifier = nn.Linear(128, num_classes)

    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        return self.classifier(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


FASHION_MODELS = {"plain_cnn": PlainCNN, "mobile_cnn": MobileStyleCNN}
# Bump when an architecture or the training recipe changes, so stale caches are not reused.
_RECIPE = "v2"


def fashion_model_cache_path(name: str) -> Path:
    return MODEL_CACHE / f"fashion_{name}_{_RECIPE}.pt"


def build_fashion_model(name: str) -> nn.Module:
    if name not in FASHION_MODELS:
        raise KeyError(f"unknown Fashion-MNIST model {name!r}; choose from {sorted(FASHION_MODELS)}")
    return FASHION_MODELS[name]()


def load_cached_fashion_model(name: str) -> nn.Module:
    """Load the cached trained model without training (used by peer runners in other venvs)."""
    path = fashion_model_cache_path(name)
    if not path.exists():
        raise FileNotFoundError(f"{path} missing: call benchmarks.models.trained_fashion_model({name!r}) first")
    model = build_fashion_model(name)
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True)["state_dict"])
    return model.eval()


def fit(model: nn.Module, train_x: torch.Tensor, train_y: torch.Tensor, opt, sched, epochs: int, batch: int,
        seed: int) -> float:
    """Cross-entropy training, shuffled with a fixed seed, the scheduler stepped per batch; seconds taken."""
    gen = torch.Generator().manual_seed(seed)
    model.train()
    t0 = time.perf_counter()
    for _ in range(epochs):
        perm = torch.randperm(len(train_x), generator=gen)
        for i in range(len(train_x) // batch):
            idx = perm[i * batch:(i + 1) * batch]
            loss = F.cross_entropy(model(train_x[idx]), train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return time.perf_counter() - t0


def trained_fashion_model(name: str, epochs: int = 2, verbose: bool = True) -> nn.Module:
    """Train (once, deterministically) or load from .cache/models/, returned in eval mode."""
    path = fashion_model_cache_path(name)
    if path.exists():
        return load_cached_fashion_model(name)
    from benchmarks.assets import fashion_mnist
    from benchmarks.metrics import accuracy

    torch.set_num_threads(2)
    torch.manual_seed(0)
    # channels_last: this CPU build's depthwise-conv backward is several times faster in NHWC.
    model = build_fashion_model(name).to(memory_format=torch.channels_last)
    train_x, train_y, test_x, test_y = fashion_mnist()
    train_x = train_x.contiguous(memory_format=torch.channels_last)
    batch = 128
    steps = epochs * (len(train_x) // batch)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-4)
    # One-cycle schedule: reaches good accuracy in 1-2 epochs, which keeps training under a minute.
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=steps)
    seconds = fit(model, train_x, train_y, opt, sched, epochs, batch, seed=0)
    model = model.to(memory_format=torch.contiguous_format).eval()
    acc = accuracy(model, test_x, test_y)
    if verbose:
        print(f"trained {name}: {epochs} epochs in {seconds:.1f} s, test accuracy {acc:.2%}")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": model.state_dict(), "test_accuracy": acc, "epochs": epochs}, path)
    return model
