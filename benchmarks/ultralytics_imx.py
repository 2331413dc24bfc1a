"""Ultralytics' own IMX500 export, `YOLO(...).export(format="imx")`, run unchanged with hwquant or with MCT.

    .venv-yolo/bin/python benchmarks/ultralytics_imx.py --toolkit hwquant --model yolov8n --task pose --work DIR --out result.json
    .venv-mct/bin/python benchmarks/ultralytics_imx.py --toolkit mct --model yolov8n --task pose --work DIR --out result.json

Ultralytics' code is not edited: with `--toolkit hwquant` the process enables hwquant.mct_alias, so the
`import model_compression_toolkit` of ultralytics/utils/export/imx.py and edge-mdt-tpc gives hwquant; with
`--toolkit mct` it is the real MCT of the virtualenv. Offline: the network is built from Ultralytics' yaml
(seeded random weights), its batch-norm statistics re-estimated on real photographs (so the layers compute
something with real ranges) and its class logits spread as a trained head's (a detector's: most anchors near
zero, a tail of confident ones; a classifier's: a peaked softmax), and the calibration data is a local dataset
folder of real photographs (detect / segment / pose: empty label files, Ultralytics' loader letterboxes to 640 and
divides by 255; classify: one class folder, resized and center-cropped to 224). Sony's converter (imxconv-pt) is
found on PATH, as Ultralytics looks for it.

Measured, beside the export (which is not changed): the PTQ call's wall time and peak resident memory
(the facade is wrapped to time it and keep its model), the whole export's wall time and the process's peak
memory, output SQNR of every output against the float model on held-out photographs (boxes, scores, keypoints,
mask coefficients, mask prototypes, class probabilities; scores also over the entries whose float score is at
least 0.05: the candidates a detector keeps), in PyTorch and
through an ONNX file (the quantized model without the NMS layer, exported by the toolkit's own exporter and
run by ONNX Runtime with mct-quantizers' operators), the converter's verdict and its memory report.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import sys
import threading
import time
from pathlib import Path

SCRIPT = Path(__file__).resolve()
ROOT = SCRIPT.parents[1]
sys.path.insert(0, str(ROOT))

N_CALIB = 32
IMGSZ = {"detect": 640, "segment": 640, "pose": 640, "classify": 224}  # Ultralytics' defaults per task
YAML_SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "classify": "-cls"}
OUTPUTS = {"detect": ("boxes", "scores"), "segment": ("boxes", "scores", "mask_coefficients", "mask_prototypes"),
           "pose": ("boxes", "scores", "keypoints"), "classify": ("probabilities",)}
SCORE_FLOOR = 0.05  # scores SQNR is also given over the float scores at or above this


def _offline_ultralytics(work: Path) -> None:
    """Ultralytics' settings for a machine without the network (its font download included)."""
    cfg = work / "ultralytics_config"
    cfg.mkdir(parents=True, exist_ok=True)
    font = cfg / "Arial.ttf"
    if not font.exists():
        import matplotlib
        shutil.copy(Path(matplotlib.get_data_path()) / "fonts/ttf/DejaVuSans.ttf", font)
    os.environ.update(YOLO_CONFIG_DIR=str(cfg), YOLO_OFFLINE="1", YOLO_AUTOINSTALL="False")


KEPT_BY_NMS = 1000  # more than edge-mdt-cl's max_detections (300), which it takes from the front


def _greedy_nms(dets, scores, iou_threshold: float):
    """torchvision.ops.nms's result, up to its first KEPT_BY_NMS kept boxes (in decreasing score, as torchvision
    returns them; the boxes after those cannot change them)."""
    import torch
    order = scores.argsort(descending=True)
    boxes = dets[order]
    areas = (boxes[:, 2] - boxes[:, 0]).clamp(min=0) * (boxes[:, 3] - boxes[:, 1]).clamp(min=0)
    alive = torch.ones(len(boxes), dtype=torch.bool)
    keep = []
    for i in range(len(boxes)):
        if not alive[i]:
            continue
        keep.append(i)
        if len(keep) == KEPT_BY_NMS:
            break
        lo, hi = torch.maximum(boxes[i, :2], boxes[:, :2]), torch.minimum(boxes[i, 2:], boxes[:, 2:])
        inter = (hi - lo).clamp(min=0).prod(dim=1)
        alive &= inter / (areas[i] + areas - inter).clamp(min=1e-12) <= iou_threshold
    return order[torch.tensor(keep, dtype=torch.long)]


def _declare_torchvision_ops() -> None:
    """PyPI's torchvision is built for CUDA torch: with the CPU wheel its C++ operators do not load, and
    its Python part imports only once their schemas exist (edge-mdt-cl imports torchvision). edge-mdt-cl's
    NMS layer calls torchvision's nms: a greedy one stands in for its missing CPU kernel."""
    import torch
    try:
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.impl("nms", _greedy_nms, "CPU")
        _declare_torchvision_ops.keepalive = lib
    except RuntimeError:  # a torchvision whose operators load
        pass


def _photos(seed: int = 0):
    from benchmarks.assets import imagenet_labelled_images, natural_images
    images = [img for img in natural_images()] + list(imagenet_labelled_images()[0])
    random.Random(seed).shuffle(images)
    return images[:N_CALIB], images[N_CALIB:]


def _dataset(work: Path, photos, task: str = "detect") -> Path:
    """A YOLO dataset folder of the calibration photographs with empty labels, and its yaml."""
    root = work / "calibration_data"
    (root / "images/val").mkdir(parents=True, exist_ok=True)
    (root / "labels/val").mkdir(parents=True, exist_ok=True)
    for i, img in enumerate(photos):
        img.convert("RGB").save(root / f"images/val/photo_{i:03d}.jpg", quality=95)
        (root / f"labels/val/photo_{i:03d}.txt").write_text("")
    yaml = work / "calibration_data.yaml"
    if task == "pose":  # (a pose dataset names its keypoints' layout: COCO's 17 keypoints of one class)
        extra, names = "kpt_shape: [17, 3]\n", "  0: person"
    else:
        extra, names = "", "\n".join(f"  {i}: class{i}" for i in range(80))
    yaml.write_text(f"path: {root}\ntrain: images/val\nval: images/val\n{extra}names:\n{names}\n")
    return yaml


def _class_folders(work: Path, photos) -> Path:
    """An image-classification dataset folder (train / val, one class) of the calibration photographs."""
    root = work / "calibration_classes"
    for split in ("train", "val"):
        (root / split / "class0").mkdir(parents=True, exist_ok=True)
        for i, img in enumerate(photos):
            img.convert("RGB").save(root / split / "class0" / f"photo_{i:03d}.jpg", quality=95)
    return root


def _center_cropped(photos, size):
    """Ultralytics' classification preprocessing: the short side resized to the size, center-cropped, /255."""
    import numpy as np
    import torch
    from PIL import Image
    h, w = size
    arrays = []
    for p in photos:
        p = p.convert("RGB")
        scale = max(h / p.height, w / p.width)
        p = p.resize((round(p.width * scale), round(p.height * scale)), Image.BILINEAR)
        left, top = (p.width - w) // 2, (p.height - h) // 2
        arrays.append(np.asarray(p.crop((left, top, left + w, top + h))))
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255.0


def _letterboxed(photos, size):
    import numpy as np
    import torch
    from ultralytics.data.augment import LetterBox
    box = LetterBox(new_shape=tuple(size), auto=False, scaleup=True)
    arrays = [box(image=np.asarray(p.convert("RGB"))[..., ::-1].copy()) for p in photos]  # BGR, as cv2 reads
    x = torch.from_numpy(np.stack(arrays)[..., ::-1].copy()).permute(0, 3, 1, 2).float() / 255.0
    return x


def _reestimate_batch_norm(model, x) -> None:
    """Seeded random weights give batch-norm layers no statistics; estimate them on real photographs
    (cumulative averages over several passes), so every layer sees realistic ranges."""
    import torch
    bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        for chunk in x.split(8):
            model(chunk)
    model.eval()


def _detector_like_scores(model, x, spread: float = 2.0, bias: float = -5.0) -> None:
    """A seeded classification head scores every anchor about the same (logits at Ultralytics' prior bias,
    -9 to -12, with a spread of 0.25): nothing a detector's threshold would read. Scale each scale's last
    classification convolution so its logits spread by `spread` around `bias`, as a trained head's do: most
    anchors near zero, a tail of confident ones (on the held-out photographs 5 % of the scores reach 0.05)."""
    import torch
    head = model.model[-1]
    finals = [branch[-1] for branch in head.cv3]
    seen = {}
    hooks = [conv.register_forward_hook(lambda m, i, o: seen.setdefault(m, o)) for conv in finals]
    with torch.no_grad():
        model(x)
    for hook in hooks:
        hook.remove()
    with torch.no_grad():
        for conv in finals:
            std = float((seen[conv] - conv.bias.view(1, -1, 1, 1)).std())
            conv.weight.mul_(spread / std)
            conv.bias.fill_(bias)


def _classifier_like_logits(model, x, spread: float = 3.0) -> None:
    """A seeded classification head gives nearly equal logits, so its softmax is flat (every probability about
    1/1000) and quantizes to nothing. Scale its last linear layer so the logits spread by `spread`, as a trained
    ImageNet classifier's do: a peaked softmax, the top class usually well above the rest."""
    import torch
    linear = model.model[-1].linear
    seen = []
    hook = linear.register_forward_hook(lambda m, i, o: seen.append(o))
    with torch.no_grad():
        model(x)
    hook.remove()
    with torch.no_grad():
        linear.weight.mul_(spread / float((seen[0] - linear.bias).std()))
        linear.bias.zero_()


class _PeakMemory:
    """Peak resident memory of this process while the block runs (sampled every 20 ms)."""

    def __enter__(self):
        import psutil
        self._proc, self.peak, self._stop = psutil.Process(), 0, threading.Event()
        self.start = self._proc.memory_info().rss

        def sample():
            while not self._stop.is_set():
                self.peak = max(self.peak, self._proc.memory_info().rss)
                time.sleep(0.02)
        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._proc.memory_info().rss)


def _sqnr(ref, out) -> float:
    import numpy as np
    ref, out = np.asarray(ref, np.float64), np.asarray(out, np.float64)
    noise = float(((ref - out) ** 2).sum())
    return float("inf") if noise == 0 else float(10 * np.log10((ref ** 2).sum() / noise))


def _as_list(out):
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in out if isinstance(t, torch.Tensor)]


def _outputs(model, x, n: int):
    """The model's first n outputs over x (in chunks), as numpy arrays."""
    import torch
    chunks = []
    with torch.no_grad():
        for chunk in x.split(4):
            chunks.append(_as_list(model(chunk))[:n])
    return [torch.cat([c[i] for c in chunks]).numpy() for i in range(n)]


def _onnx_outputs(mct, quantized, calib_x, x, path: Path, n: int):
    """The quantized model (no NMS layer) exported by the toolkit's own exporter and run by ONNX Runtime."""
    import mct_quantizers
    import numpy as np
    import onnxruntime as ort
    from ultralytics.utils.patches import onnx_export_patch

    def rep():
        yield [calib_x[:1]]
    with onnx_export_patch():  # as Ultralytics exports (dynamo off on torch >= 2.9; MCT needs it)
        mct.exporter.pytorch_export_model(model=quantized, save_model_path=path, repr_dataset=rep)
    options = mct_quantizers.get_ort_session_options()
    options.enable_mem_reuse = False  # as Ultralytics runs these files: ORT's buffer reuse fails on them
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    rows = [session.run(None, {name: x[i:i + 1].numpy()})[:n] for i in range(len(x))]  # MCT's file: batch of 1
    return [np.concatenate([r[i] for r in rows]) for i in range(n)]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--toolkit", choices=["hwquant", "mct"], required=True)
    p.add_argument("--model", default="yolov8n", help="an Ultralytics model yaml name: yolov8n, yolo11n")
    p.add_argument("--task", choices=list(IMGSZ), default="detect")
    p.add_argument("--imgsz", type=int, nargs="+", help="the export's input size: one number or height width "
                   "(default: Ultralytics' for the task)")
    p.add_argument("--gptq", action="store_true", help="Ultralytics' GPTQ export (torch2imx(gptq=True))")
    p.add_argument("--weights", type=Path, help="a trained Ultralytics checkpoint (.pt) to export instead of the "
                   "seeded network of --model and --task (.cache/assets/yolo_weights: scripts/fetch_yolo_weights.sh)")
    p.add_argument("--phase", choices=["prepare", "export"], default="export", help=argparse.SUPPRESS)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    work, args.out = args.work.resolve(), args.out.resolve()
    args.weights = args.weights.resolve() if args.weights else None
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)  # Ultralytics writes <model>_imx_model/ beside the model's name
    _offline_ultralytics(work)
    _declare_torchvision_ops()
    if args.toolkit == "hwquant":
        import hwquant.mct_alias
        hwquant.mct_alias.enable()
    import model_compression_toolkit as mct
    import torch
    from ultralytics import YOLO

    size = args.imgsz or [IMGSZ[args.task]]
    size = size * 2 if len(size) == 1 else size[:2]
    classify = args.task == "classify"
    prepare = _center_cropped if classify else _letterboxed
    weights = work / f"{args.model}{YAML_SUFFIX[args.task]}-prepared.pt"
    if args.phase == "prepare":  # the network a user would hand over, written as Ultralytics' checkpoint
        torch.manual_seed(0)
        calib, _ = _photos()
        yolo = YOLO(f"{args.model}{YAML_SUFFIX[args.task]}.yaml")
        calib_x = prepare(calib, size)
        _reestimate_batch_norm(yolo.model, torch.cat([calib_x, calib_x.flip(-1)]))
        if classify:
            _classifier_like_logits(yolo.model, calib_x[:8])
        else:
            _detector_like_scores(yolo.model, calib_x[:8])
        yolo.save(weights)
        return
    # the export, in a process that has done nothing else (its peak memory is the user's export's): the prepared
    # network is made in a process of its own first
    import subprocess
    if args.weights:  # (a copy in the work folder: Ultralytics writes its output beside the model's file)
        weights = work / args.weights.name
        shutil.copy(args.weights, weights)
    else:
        subprocess.run([sys.executable, str(SCRIPT), "--phase", "prepare", "--toolkit", args.toolkit, "--model", args.model,
                        "--task", args.task, "--imgsz", *map(str, size), "--work", str(work), "--out", str(args.out)],
                       check=True)
    calib, held_out = _photos()
    data = _class_folders(work, calib) if classify else _dataset(work, calib, args.task)
    yolo = YOLO(str(weights))

    seen = {}
    facade = "gptq.pytorch_gradient_post_training_quantization" if args.gptq else "ptq.pytorch_post_training_quantization"
    module, name = facade.split(".")
    original = getattr(getattr(mct, module), name)

    def timed(*a, **kw):  # the facade Ultralytics calls, timed; its models kept for the figures
        with _PeakMemory() as mem:
            t = time.perf_counter()
            result = original(*a, **kw)
            seen["ptq_s"] = time.perf_counter() - t
        seen.update(ptq_peak_rss_mb=mem.peak / 2 ** 20, ptq_extra_rss_mb=(mem.peak - mem.start) / 2 ** 20,
                    float_model=kw.get("model", kw.get("in_module", a[0] if a else None)), quantized=result[0])
        return result
    setattr(getattr(mct, module), name, timed)
    if args.gptq:  # torch2imx's own gptq=True (Ultralytics' exporter does not pass it from the command line yet)
        import functools

        from ultralytics.utils.export import imx
        imx.torch2imx = functools.partial(imx.torch2imx, gptq=True)

    t = time.perf_counter()
    error = None
    try:
        exported = yolo.export(format="imx", data=str(data), imgsz=size if size[0] != size[1] else size[0])
    except BaseException as e:  # the converter's refusal arrives as CalledProcessError
        exported, error = None, f"{type(e).__name__}: {e}"
    export_s = time.perf_counter() - t
    result = {"toolkit": args.toolkit, "model": args.model, "task": args.task,
              "weights": str(args.weights) if args.weights else "seeded, heads spread", "imgsz": size, "gptq": args.gptq,
              "toolkit_version": mct.__version__, "export_s": export_s, "exported": exported, "error": error,
              "process_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
              "converter_peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}
    result.update({k: v for k, v in seen.items() if k.endswith(("_s", "_mb"))})
    if exported:
        exported = str(Path(exported).resolve())
        result["exported"] = exported
        reports = list(Path(exported).glob("*MemoryReport.json"))
        result["converter"] = "accepted" if reports else "no memory report"
        if reports:
            result["memory_report"] = json.loads(reports[0].read_text())
    else:
        result["converter"] = "refused or not reached"
    if "quantized" in seen:
        calib_x, eval_x = prepare(calib, size), prepare(held_out, size)
        names = OUTPUTS[args.task]
        float_out = _outputs(seen["float_model"], eval_x, len(names))
        quant_out = _outputs(seen["quantized"], eval_x, len(names))
        result.update(n_eval=len(eval_x), **{f"sqnr_{k}_db": _sqnr(f, q) for k, f, q in zip(names, float_out, quant_out)})
        kept = None
        if "scores" in names:
            fs, qs = float_out[1], quant_out[1]
            kept = fs >= SCORE_FLOOR  # the candidates a detector keeps; most of the 8400 x 80 scores are ~0
            result.update(sqnr_kept_scores_db=_sqnr(fs[kept], qs[kept]), n_kept_scores=int(kept.sum()))
        if classify:
            result["top1_agreement"] = float((float_out[0].argmax(1) == quant_out[0].argmax(1)).mean())
        try:
            onnx_out = _onnx_outputs(mct, seen["quantized"], calib_x, eval_x, work / "quantized_no_nms.onnx", len(names))
            result.update({f"onnx_sqnr_{k}_db": _sqnr(f, o) for k, f, o in zip(names, float_out, onnx_out)})
            if kept is not None:
                result["onnx_sqnr_kept_scores_db"] = _sqnr(float_out[1][kept], onnx_out[1][kept])
        except Exception as e:  # noqa: BLE001 - reported in the figures
            result["onnx_error"] = f"{type(e).__name__}: {e}"[:500]
    args.out.write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps({k: v for k, v in result.items() if k != "memory_report"}, indent=2, default=str))


if __name__ == "__main__":
    main()
