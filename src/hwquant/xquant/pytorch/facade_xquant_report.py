"""MCT's module `model_compression_toolkit.xquant.pytorch.facade_xquant_report`: the PyTorch report facades."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "xquant_report_pytorch_experimental": "hwquant.torch.xquant",
    "xquant_report_troubleshoot_pytorch_experimental": "hwquant.torch.xquant",
}, globals())
