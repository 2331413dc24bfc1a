"""A quick fidelity check on two small real networks, run in CI: MTCNN's R-Net and O-Net (facenet-pytorch's
trained weights, fetched by scripts/setup.sh) on the candidate crops the cascade itself proposes in
scikit-image's photographs, quantized with the default (IMX500) TPC. Each output SQNR must stay at or above
the figure measured when the check was written, less a margin for the arithmetic of another CPU, so a change
that costs fidelity on real models fails here, not unnoticed in a later benchmark run
(benchmarks/run_real_models.py compares every figure with its previous run too)."""
import functools
import math

import numpy as np
import pytest
import torch

import hwquant as mct
from hwquant.torch.quantizers import PytorchQuantizationWrapper

real_models = pytest.importorskip("benchmarks.real_models")
skimage_data = pytest.importorskip("skimage.data")
if not (real_models.REAL / real_models.MTCNN_DIR).exists():
    pytest.skip("facenet-pytorch's MTCNN weights are not in .cache/assets/real (bash scripts/setup.sh fetches them)",
                allow_module_level=True)

# (total SQNR, per-output SQNRs: boxes, [landmarks,] face probabilities) measured 2026-11-26 (IMX500 1.0 TPC,
# 48 calibration / 48 other crops)
FLOORS = {"rnet": (26.19, (18.36, 32.66)), "onet": (34.78, (20.42, 39.0, 36.59))}
MARGIN_DB = 0.5
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "cat")


@functools.lru_cache(maxsize=None)
def _proposals() -> tuple:
    """skimage's photographs (longest side 320) and the boxes MTCNN's P-Net and R-Net propose in them: real
    faces and the non-faces that get through the first stages, the crops the later stages see."""
    from PIL import Image

    nets = tuple(real_models._mtcnn_net(cls, f) for cls, f in
                 ((real_models.PNet, "pnet.pt"), (real_models.RNet, "rnet.pt"), (real_models.ONet, "onet.pt")))
    found = []
    for name in PHOTOS:
        photo = Image.fromarray(np.ascontiguousarray(getattr(skimage_data, name)()[..., :3]))
        scale = 320 / max(photo.size)
        a = np.asarray(photo.resize((round(photo.width * scale), round(photo.height * scale)), Image.BILINEAR))
        found.append((torch.from_numpy(a.astype(np.uint8)).permute(2, 0, 1).float(),
                      real_models.mtcnn_detect(a, nets, min_face=24, stage=1)[:48]))
    return tuple(found)


def _candidate_crops(size: int) -> torch.Tensor:
    return real_models.mtcnn_normalise(torch.cat([real_models._crops(img, boxes, size) for img, boxes in _proposals()]))


def _sqnr(ref: torch.Tensor, out: torch.Tensor) -> float:
    return 10 * math.log10(ref.pow(2).mean().item() / (ref - out).pow(2).mean().item())


@pytest.mark.parametrize("net, size", [("rnet", 24), ("onet", 48)])
def test_mtcnn_fidelity_does_not_go_down(net, size):
    torch.manual_seed(0)
    model = real_models._mtcnn_net(real_models.RNet if net == "rnet" else real_models.ONet, f"{net}.pt")
    crops = _candidate_crops(size)
    order = torch.from_numpy(np.random.default_rng(0).permutation(len(crops)))
    assert len(crops) >= 96, f"only {len(crops)} candidate crops"
    calib, held_out = crops[order[:48]], crops[order[48:96]]
    q, info = mct.ptq.pytorch_post_training_quantization(model, lambda: iter([[calib[:24]], [calib[24:]]]))
    # every layer with weights is quantized or listed as left float, with the reason (here the PReLUs' slopes)
    weighted = {name.replace(".", "_") for name, m in model.named_modules()
                if not list(m.children()) and any(True for _ in m.parameters(recurse=False))}
    wrapped = {name for name, m in q.named_modules() if isinstance(m, PytorchQuantizationWrapper)}
    assert weighted == {w for w in weighted if any(n in (w, f"{w}_bn") for n in wrapped)} | set(info.float_layers)
    assert all(why.startswith("PReLU:") for why in info.float_layers.values())
    with torch.no_grad():
        ref, out = model(held_out), q(held_out)
    total = _sqnr(torch.cat([r.flatten(1) for r in ref], 1), torch.cat([o.flatten(1) for o in out], 1))
    parts = [round(_sqnr(r, o), 2) for r, o in zip(ref, out)]
    floor, part_floors = FLOORS[net]
    print(f"{net}: {total:.2f} dB, per output {parts}")
    assert total >= floor - MARGIN_DB, f"{net} output SQNR {total:.2f} dB, below {floor} dB measured before"
    for value, part_floor in zip(parts, part_floors):
        assert value >= part_floor - MARGIN_DB, f"{net} per-output SQNR {parts}, below {part_floors} measured before"
