"""Checks that the weights are the trained ones: `python -m benchmarks.real_models [name ...]` loads each model,
runs it and prints what it makes of inputs with a known answer (paraphrases, rendered text, faces, labelled
ImageNet images, ...), against the same network with freshly initialised weights or the shipped runtime's
output."""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from .common import RealModel, _need, ctc_greedy_decode
from .easyocr_models import EASYOCR_CHARSET, craft_scenes, easyocr_lines
from .efficientnet_lite import imagenet_to_lite
from .legere_ocr import LEGERE_CHARSET, legere_lines
from .minilm import PARAPHRASES, minilm_tokenize
from .mtcnn_face import ONet, PNet, RNet, _mtcnn_net, mtcnn_detect
from .onnx_convert import ONNX_MODELS
from .ppocr_direction import ppocr_cls_lines
from .ppocr_v4 import ppocr_det_scenes, ppocr_rec_charset, ppocr_rec_lines
from .registry import REGISTRY
from .resemblyzer_speaker import speaker_inputs
from .silero import SILERO_CHUNK, SILERO_CHUNKS, SILERO_CONTEXT, SILERO_JIT, vad_audio
from .yolox_captcha import yolox_captchas, yolox_decode


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
