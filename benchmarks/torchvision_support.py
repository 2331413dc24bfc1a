"""Import torchvision on the CPU-only torch wheel (its compiled operators are missing; declaring the
two operator schemas lets the pure-Python model definitions load). Benchmarks and tests only:
the package itself does not depend on torchvision."""
import torch


def import_torchvision():
    try:
        import torchvision  # noqa: F401
    except (RuntimeError, ImportError):
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        import_torchvision.lib = lib  # keep the library alive
        import torchvision  # noqa: F401
    import torchvision
    return torchvision
