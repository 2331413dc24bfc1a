"""Checks of hwquant.yolo.export_imx500 run by tests/test_ultralytics_imx.py in .venv-yolo (hwquant beside Ultralytics
and edge-mdt-cl; scripts/setup_ultralytics_imx.sh), offline, on real photographs; prints one JSON line.

    python tests/yolo_imx500_checks.py names|errors|fit WORK_DIR
"""
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _setup(work: Path) -> Path:
    from benchmarks import ultralytics_imx as U
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    U._offline_ultralytics(work)
    U._declare_torchvision_ops()
    images = work / "images"
    images.mkdir(exist_ok=True)
    for k, photo in enumerate(U._photos()[0][:16]):
        photo.convert("RGB").save(images / f"photo_{k:03d}.jpg", quality=95)
    return images


def names(work: Path) -> dict:
    """The head nodes export_imx500 keeps at 16 bits, found in the graph, against the names Ultralytics writes by
    hand for its nano networks."""
    import hwquant
    from ultralytics.utils.export.imx import MCT_CONFIG
    images, found = _setup(work), {}
    for family, model in (("YOLOv8", "yolov8n"), ("YOLO11", "yolo11n")):
        for task, suffix in (("detect", ""), ("segment", "-seg"), ("pose", "-pose")):
            r = hwquant.yolo.export_imx500(f"{model}{suffix}.yaml", images, 320, output_dir=work / f"{model}{suffix}",
                                           convert=False)
            found[f"{model}{suffix}"] = [sorted(r.sixteen_bit_nodes), sorted(MCT_CONFIG[family][task]["layer_names"]),
                                         r.onnx_file.exists(), r.fits]
    return found


def errors(work: Path) -> dict:
    """Bad input: each refusal's type and message."""
    import torch
    from ultralytics import YOLO

    import hwquant
    images = _setup(work)
    checkpoint = work / "model.pt"
    torch.save({"model": None}, checkpoint)
    (work / "empty").mkdir(exist_ok=True)
    cases = {"pickle": lambda: hwquant.yolo.export_imx500(checkpoint, images, 320, convert=False),
             "imgsz": lambda: hwquant.yolo.export_imx500("yolov8n.yaml", images, 300, convert=False),
             "no images": lambda: hwquant.yolo.export_imx500("yolov8n.yaml", work / "empty", 320, convert=False),
             "missing yaml": lambda: hwquant.yolo.export_imx500("yolov8n.yaml", work / "none.yaml", 320, convert=False),
             "model type": lambda: hwquant.yolo.export_imx500(42, images, 320, convert=False)}
    out = {}
    for name, call in cases.items():
        try:
            call()
            out[name] = ["no error", ""]
        except Exception as e:  # noqa: BLE001 - the test reads the type and message
            out[name] = [type(e).__name__, str(e)]
    # a plain Ultralytics export in this process after export_imx500 still gets Ultralytics' own step (its nano check)
    from benchmarks import ultralytics_imx as U
    dataset = U._dataset(work, U._photos()[0][:4])
    try:
        YOLO("yolov8s.yaml").export(format="imx", data=str(dataset), imgsz=320)
        out["plain export"] = ["no error", ""]
    except Exception as e:  # noqa: BLE001
        out["plain export"] = [type(e).__name__, str(e)]
    return out


def fit(work: Path) -> dict:
    """YOLOv8s (11 M parameters, 10.6 MB of 8-bit weights), which Ultralytics refuses, at 320 px with the converter."""
    import hwquant
    r = hwquant.yolo.export_imx500("yolov8s.yaml", _setup(work), 320, output_dir=work / "imx500")
    return {"fits": r.fits, "attempts": r.attempts, "packer": str(r.packer_file), "sixteen": r.sixteen_bit_nodes}


if __name__ == "__main__":
    result = {"names": names, "errors": errors, "fit": fit}[sys.argv[1]](Path(sys.argv[2]))
    print("RESULT " + json.dumps(result, default=str))
