"""Ultralytics YOLO detectors, segmenters, pose estimators and classifiers of any scale to Sony's IMX500
(``hwquant.yolo.export_imx500``).

Ultralytics' own IMX export takes the nano models only: its settings (a weights budget and the names of the
head's nodes kept at 16 bits) are written per nano network. This runs Ultralytics' exporter as it is (its model
preparation, data loading, letterboxing, metadata and output folder) and replaces only its quantization step,
in this thread: hwquant quantizes with the IMX500 TPC, finds the head's pixel-coordinate nodes in the captured
graph (any scale), wraps the network with edge-mdt-cl's NMS layer as Ultralytics does, exports the MCTQ ONNX
file and runs Sony's converter. When the converter's memory report says the network does not fit the chip,
mixed precision quantizes again under the weights budget that report leaves (exporter/imx500_fit.py).
"""
from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from hwquant.errors import ExportError, InvalidConfigError
from hwquant.exporter.imx500_fit import (ChipMemory, anchors_of, next_weights_budget,
                                         pixel_coordinate_nodes, read_memory_report)
from hwquant.logger import logger
from hwquant.model_files import refusal

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}
GROUP = 16  # calibration images per batch (Ultralytics' loader hands one at a time)
MAX_ATTEMPTS = 3


@dataclass
class Imx500Export:
    """What ``export_imx500`` made: the folder (Ultralytics' layout: the converter's packerOut.zip, its memory
    report, labels.txt, model_imx.onnx), whether the network fits the chip, and each attempt's figures."""
    output_dir: Path
    onnx_file: Path
    task: str
    imgsz: Tuple[int, int]
    converted: bool
    fits: Optional[bool]  # None: not converted (no memory report to say)
    memory_report: Optional[Dict[str, Any]]
    weights_memory: Optional[float]  # the weights budget (bytes) of the file written; None: all at 8 bits
    sixteen_bit_nodes: List[str]
    attempts: List[Dict[str, Any]] = field(default_factory=list)
    quantization_info: Any = None  # the PTQ / GPTQ call's UserInformation
    quantized_model: Any = None  # the fake-quantized network of the file, without the NMS layer (to evaluate it)

    @property
    def packer_file(self) -> Optional[Path]:
        path = self.output_dir / "packerOut.zip"
        return path if path.exists() else None


@dataclass
class _Request:
    output_dir: Optional[Path]
    weights_memory: Optional[float]
    gptq: bool
    gptq_epochs: int
    convert: bool
    mixed_precision_images: int
    converter: Optional[str]
    result: Optional[Imx500Export] = None


_ACTIVE = threading.local()  # the request of this thread's export_imx500 call, read by the replaced step
_INSTALL_LOCK = threading.Lock()


def export_imx500(model: Any, data: Any, imgsz: Union[int, Sequence[int]] = 640, *, output_dir: Any = None,
                  weights_memory: Optional[float] = None, gptq: bool = False, gptq_epochs: int = 50,
                  conf: Optional[float] = None, iou: float = 0.7, max_det: int = 300, fraction: float = 1.0,
                  convert: bool = True, mixed_precision_images: int = 10,
                  trust_model_file: bool = False) -> Imx500Export:
    """Quantize an Ultralytics YOLO model (detect, segment, pose or classify; any scale) for the IMX500 and
    write the files Sony's converter takes, through Ultralytics' own exporter.

    Args:
        model: an ``ultralytics.YOLO``, a model yaml (``yolo11s.yaml``: the architecture, untrained) or a
            checkpoint ``.pt`` (a pickle: read only with ``trust_model_file=True``; or load it yourself with
            ``YOLO(path)`` and pass that).
        data: calibration images: a folder of images, a list of image files, or a dataset yaml in
            Ultralytics' format.
        imgsz: the input size, one number or (height, width) (multiples of 32).
        output_dir: where to write (default: Ultralytics' ``<model>_imx_model`` beside the model's file).
        weights_memory: a weights budget in bytes for mixed precision; by default the network is quantized
            at 8 bits and, if the converter says it does not fit, again under the budget its report leaves.
        gptq: gradient-based PTQ (hwquant's GPTQ, ``gptq_epochs`` epochs) instead of plain PTQ.
        conf, iou, max_det: the NMS layer's score threshold (Ultralytics' default 0.001), IoU threshold and
            detections kept.
        fraction: the fraction of the dataset's images used to calibrate (Ultralytics' argument).
        convert: run Sony's converter (``imxconv-pt``: beside this Python or on PATH); False writes the ONNX
            file only (no memory report: whether it fits is then unknown).
        mixed_precision_images: images the mixed-precision search measures with.
        trust_model_file: read a ``.pt`` checkpoint as Ultralytics does (full pickle: runs code it holds).
    """
    size = (int(imgsz), int(imgsz)) if isinstance(imgsz, (int, float)) else tuple(int(v) for v in imgsz)
    if len(size) != 2 or any(v <= 0 or v % 32 for v in size):
        raise InvalidConfigError(f"imgsz must be one number or (height, width), each a positive multiple of 32 "
                                 f"(the network's largest stride), got {imgsz!r}")
    try:
        from ultralytics import YOLO
        from ultralytics.utils.export import imx  # noqa: F401 - the exporter's IMX module, replaced in part below
    except ImportError as e:
        raise ImportError(f"hwquant.yolo.export_imx500 needs Ultralytics and Sony's edge-mdt-cl (its NMS layer): "
                          f"pip install ultralytics edge-mdt-cl ({e})") from e
    yolo = _as_yolo(model, trust_model_file, YOLO)
    task = getattr(yolo, "task", None)
    if task not in ("detect", "segment", "pose", "classify"):
        raise InvalidConfigError(f"the IMX500 export takes detect, segment, pose and classify models; this one's task "
                                 f"is {task!r}")
    converter = _find_converter() if convert else None
    if convert and converter is None:
        raise ExportError("Sony's converter imxconv-pt was found neither beside this Python nor on PATH: "
                          "pip install \"imx500-converter[pt]\" (a virtual environment of its own is fine: put its bin "
                          "folder on PATH), or pass convert=False to write the ONNX file only")
    request = _Request(Path(output_dir).resolve() if output_dir is not None else None, weights_memory, gptq,
                       gptq_epochs, convert, mixed_precision_images, converter)
    _install_step()
    with tempfile.TemporaryDirectory(prefix="hwquant-imx500-data-") as scratch:
        dataset = _dataset_argument(data, task, yolo, Path(scratch))
        _ACTIVE.request = request
        try:
            yolo.export(format="imx", data=str(dataset), imgsz=list(size), conf=conf, iou=iou, max_det=max_det,
                        fraction=fraction, nms=task != "classify")
        finally:
            _ACTIVE.request = None
    if request.result is None:  # Ultralytics reports its own failures by raising: a silent return is not expected
        raise ExportError("Ultralytics' exporter returned without running the IMX500 step; see its log above")
    request.result.imgsz = size
    return request.result


# ---- the model and the data -----------------------------------------------------------------------------------------
def _as_yolo(model: Any, trust: bool, yolo_class: Any) -> Any:
    if isinstance(model, yolo_class):
        return model
    if isinstance(model, (str, Path)):
        path = Path(model)
        if path.suffix in (".yaml", ".yml"):
            return yolo_class(str(path))
        if path.suffix in (".pt", ".pth"):
            if not trust:
                raise refusal(path, "is an Ultralytics checkpoint, a pickle that can run code when read",
                              "load it yourself with ultralytics.YOLO(path) and pass that", "trust_model_file=True")
            return yolo_class(str(path))
    raise InvalidConfigError(f"model must be an ultralytics.YOLO, a model yaml or a .pt checkpoint, got {model!r}")


def _images(data: Any) -> List[Path]:
    if isinstance(data, (str, Path)) and Path(data).is_dir():
        found = sorted(p for p in Path(data).rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    elif isinstance(data, (list, tuple)):
        found = [Path(p) for p in data]
        missing = [str(p) for p in found if not p.is_file()]
        if missing:
            raise InvalidConfigError(f"calibration images not found: {', '.join(missing[:3])}")
    else:
        raise InvalidConfigError(f"data must be a folder of images, a list of image files or a dataset yaml, got {data!r}")
    if not found:
        raise InvalidConfigError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {data}")
    return found


def _dataset_argument(data: Any, task: str, yolo: Any, scratch: Path) -> Path:
    """What Ultralytics' exporter takes as `data`: the user's dataset yaml, or one made of the images given
    (a detection / segmentation / pose dataset with empty labels; a classification one, one class folder)."""
    if isinstance(data, (str, Path)) and Path(data).suffix in (".yaml", ".yml"):
        if not Path(data).is_file():
            raise InvalidConfigError(f"dataset yaml not found: {data}")
        return Path(data).resolve()
    images = _images(data)
    if task == "classify":
        for split in ("train", "val"):
            folder = scratch / split / "calibration"
            folder.mkdir(parents=True)
            for k, image in enumerate(images):
                (folder / f"{k:05d}{image.suffix.lower()}").symlink_to(image.resolve())
        return scratch
    for sub in ("images/val", "labels/val"):
        (scratch / sub).mkdir(parents=True)
    for k, image in enumerate(images):
        (scratch / "images/val" / f"{k:05d}{image.suffix.lower()}").symlink_to(image.resolve())
        (scratch / "labels/val" / f"{k:05d}.txt").write_text("")
    names = "\n".join(f"  {i}: {str(n)!r}" for i, n in yolo.names.items())
    kpt = yolo.model.kpt_shape if task == "pose" else None
    yaml = scratch / "calibration.yaml"
    yaml.write_text(f"path: {scratch}\ntrain: images/val\nval: images/val\n"
                    + (f"kpt_shape: [{kpt[0]}, {kpt[1]}]\n" if kpt else "") + f"names:\n{names}\n")
    return yaml


def _find_converter() -> Optional[str]:
    beside = Path(sys.executable).parent / "imxconv-pt"
    return str(beside) if beside.exists() else shutil.which("imxconv-pt")


# ---- the step that replaces Ultralytics' torch2imx in the calling thread -------------------------------------------
def _install_step() -> None:
    """Route ultralytics.utils.export.imx.torch2imx to hwquant's step for threads inside export_imx500; any
    other caller (another thread's plain Ultralytics export) gets Ultralytics' own."""
    from ultralytics.utils.export import imx
    with _INSTALL_LOCK:
        if getattr(imx.torch2imx, "_hwquant_original", None) is not None:
            return
        original = imx.torch2imx

        @functools.wraps(original)
        def torch2imx(*args: Any, **kwargs: Any) -> Any:
            request = getattr(_ACTIVE, "request", None)
            if request is None:
                return original(*args, **kwargs)
            return _quantize_and_convert(request, *args, **kwargs)

        torch2imx._hwquant_original = original  # type: ignore[attr-defined]
        imx.torch2imx = torch2imx


def _calibration(dataset: Any) -> Callable[[], Iterator[List[torch.Tensor]]]:
    loader = dataset() if callable(dataset) else dataset

    def batches() -> Iterator[List[torch.Tensor]]:
        group: List[torch.Tensor] = []
        for batch in loader:
            group.append(batch["img"].float() / 255.0)
            if sum(len(g) for g in group) >= GROUP:
                yield [torch.cat(group)]
                group = []
        if group:
            yield [torch.cat(group)]
    return batches


def _quantize_and_convert(request: _Request, model: torch.nn.Module, output_dir: Any, conf: Optional[float] = None,
                          iou: float = 0.7, max_det: int = 300, metadata: Optional[dict] = None, gptq: bool = False,
                          dataset: Any = None, prefix: str = "", **_: Any) -> str:
    from hwquant.core.configuration.config import (BitWidthConfig, CoreConfig, MixedPrecisionQuantizationConfig,
                                                   QuantizationConfig, ResourceUtilization)
    from hwquant.core.configuration.network_editor import NodeNameFilter
    from hwquant.torch.capture.routes import capture
    from hwquant.torch.facade import pytorch_resource_utilization_data
    from hwquant.tpc.platforms import get_target_platform_capabilities

    out = request.output_dir or Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    task = model.task
    representative = _calibration(dataset)
    example = next(iter(representative()))[0][:1]
    tpc = get_target_platform_capabilities(tpc_version="4.0", device_type="imx500")
    sixteen: List[str] = []
    if task != "classify":
        head = model.model[-1]
        graph = capture(model, [example])
        sixteen = pixel_coordinate_nodes(graph, anchors_of(model.imgsz, head.stride.tolist()))
    bits = BitWidthConfig()
    for name in sixteen:
        bits.set_manual_activation_bit_width([NodeNameFilter(name)], 16)
    core = CoreConfig(mixed_precision_config=MixedPrecisionQuantizationConfig(num_of_images=request.mixed_precision_images),
                      quantization_config=QuantizationConfig(concat_threshold_update=True), bit_width_config=bits)
    full = pytorch_resource_utilization_data(model, representative, core, tpc).weights_memory
    budget = request.weights_memory
    attempts: List[Dict[str, Any]] = []
    unreachable, report = False, None
    logger.info(f"IMX500 export: {task} model, input {tuple(model.imgsz)}, weights {full / 2 ** 20:.2f} MB at 8 bits; "
                f"{len(sixteen)} head node(s) at 16-bit activations: {', '.join(sixteen)}")
    for attempt in range(1, MAX_ATTEMPTS + 1):
        target = ResourceUtilization(weights_memory=budget) if budget is not None and budget < full else None
        start = time.perf_counter()
        try:
            quantized, info = _quantize(model, representative, target, core, tpc, request)
        except InvalidConfigError as e:
            if attempt == 1 or "smallest reachable" not in str(e):
                raise
            # the budget the chip leaves is below the weights at the fewest bits the TPC allows: the file of the
            # attempt before stays (it does not fit: said below)
            attempts.append({"attempt": attempt, "weights_budget": budget, "unreachable": str(e)})
            unreachable = True
            break
        record: Dict[str, Any] = {"attempt": attempt, "weights_budget": budget,
                                  "weights_memory": info.resource_utilization.weights_memory,
                                  "quantize_s": round(time.perf_counter() - start, 1)}
        onnx_file = _write_onnx(quantized, task, out, example, conf, iou, max_det, metadata)
        figure = record["weights_memory"]
        attempts.append(record)
        memory = None
        if request.converter is not None:
            start = time.perf_counter()
            report = _convert(request.converter, onnx_file, out)
            record["convert_s"] = round(time.perf_counter() - start, 1)
            memory = ChipMemory.from_report(report)
            record.update(model_memory=memory.model, runtime_memory=memory.runtime, fits=memory.fits)
            logger.info(f"IMX500 export, attempt {attempt}: weights {figure / 2 ** 20:.2f} MB; the converter counts "
                        f"model {memory.model / 2 ** 20:.2f} MB + runtime {memory.runtime / 2 ** 20:.2f} MB of "
                        f"{memory.available / 2 ** 20:.2f} MB: {'fits' if memory.fits else 'does not fit'}")
        fits = None if memory is None else memory.fits
        if fits is not False or request.weights_memory is not None or attempt == MAX_ATTEMPTS:
            break
        budget = next_weights_budget(memory, figure) if budget is None else min(budget, next_weights_budget(memory, figure))
        if budget <= 0 or budget >= figure:
            break  # the activations alone do not fit: nothing a weights budget can do (said below)
    if fits is False:
        if budget is not None and budget <= 0:
            why = (f"its activations alone take {memory.runtime / 2 ** 20:.2f} MB of the chip's "
                   f"{memory.available / 2 ** 20:.2f} MB at input {tuple(model.imgsz)}")
        elif unreachable:
            why = (f"the {budget / 2 ** 20:.2f} MB its activations leave for the weights is below the weights at the "
                   "fewest bits the IMX500 allows")
        else:
            why = (f"after {len(attempts)} attempt(s) it takes {memory.total / 2 ** 20:.2f} MB of "
                   f"{memory.available / 2 ** 20:.2f} MB")
        logger.warning(f"IMX500 export: the network does not fit the chip: {why}. Use a smaller input size or a "
                       f"smaller scale (the file written is attempt {len(attempts) - unreachable}'s)")
    (out / "labels.txt").write_text("".join(f"{name}\n" for name in model.names.values()), encoding="utf-8")
    request.result = Imx500Export(
        output_dir=out, onnx_file=onnx_file, task=task, imgsz=tuple(model.imgsz), converted=memory is not None,
        fits=fits, memory_report=report if memory is not None else None,
        weights_memory=attempts[-1 - unreachable]["weights_budget"], sixteen_bit_nodes=sixteen, attempts=attempts,
        quantization_info=info, quantized_model=quantized)
    return str(out)


def _quantize(model: torch.nn.Module, representative: Callable, target: Any, core: Any, tpc: Any,
              request: _Request) -> Any:
    from hwquant.torch.facade import pytorch_post_training_quantization
    from hwquant.torch.gptq.facade import get_pytorch_gptq_config, pytorch_gradient_post_training_quantization
    if request.gptq:
        config = get_pytorch_gptq_config(n_epochs=request.gptq_epochs, use_hessian_based_weights=False,
                                         use_hessian_sample_attention=False)  # (as Ultralytics asks)
        return pytorch_gradient_post_training_quantization(
            model, representative, target_resource_utilization=target, gptq_config=config, core_config=core,
            target_platform_capabilities=tpc)
    return pytorch_post_training_quantization(model, representative, target_resource_utilization=target,
                                              core_config=core, target_platform_capabilities=tpc)


def _write_onnx(quantized: torch.nn.Module, task: str, out: Path, example: torch.Tensor, conf: Optional[float],
                iou: float, max_det: int, metadata: Optional[dict]) -> Path:
    import onnx
    from ultralytics.utils.export.imx import NMSWrapper
    from ultralytics.utils.patches import onnx_export_patch

    from hwquant.torch.deployment.exporter import pytorch_export_model

    if task != "classify":
        quantized = NMSWrapper(model=quantized, score_threshold=0.001 if conf is None else conf,
                               iou_threshold=iou, max_detections=max_det, task=task)
    path = out / "model_imx.onnx"
    with onnx_export_patch():  # (Ultralytics' own: the TorchScript-based ONNX exporter)
        # one image: the converter takes batch 1
        pytorch_export_model(model=quantized, save_model_path=path, repr_dataset=lambda: iter([[example]]))
    proto = onnx.load(path)
    for key, value in (metadata or {}).items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, str(value)
    onnx.save(proto, path)
    return path


def _convert(converter: str, onnx_file: Path, out: Path) -> Dict[str, Any]:
    """Run Sony's converter and return its memory report; a network too large for the chip makes it fail after
    writing that report, which the caller reads (any other failure is an error)."""
    for old in out.glob("*MemoryReport.json"):  # (a report of an earlier attempt must not be read as this one's)
        old.unlink()
    done = subprocess.run([converter, "-i", str(onnx_file), "-o", str(out), "--no-input-persistency",
                           "--overwrite-output"], check=False)
    report = read_memory_report(out)
    if report is None:
        raise ExportError(f"Sony's converter {'refused' if done.returncode else 'wrote no memory report for'} "
                          f"{onnx_file} (exit status {done.returncode}): see its output above")
    if done.returncode != 0 and ChipMemory.from_report(report).fits:
        raise ExportError(f"Sony's converter refused {onnx_file} (exit status {done.returncode}): see its output above")
    return report
