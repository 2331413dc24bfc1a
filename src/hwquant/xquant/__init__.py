"""`mct.xquant`: why a quantized model lost accuracy. The report is written once (framework-free, in this
package) over a small back end per framework (hwquant.torch.xquant, hwquant.keras.xquant), whose facades
load on first use."""
from hwquant.lazy import lazy_table
from hwquant.xquant.config import XQuantConfig  # noqa: F401

__getattr__, __dir__ = lazy_table("hwquant.xquant", {
    "xquant_report_pytorch_experimental": "hwquant.torch.xquant",
    "xquant_report_troubleshoot_pytorch_experimental": "hwquant.torch.xquant",
    "xquant_report_keras_experimental": "hwquant.keras.xquant",
    "xquant_report_troubleshoot_keras_experimental": "hwquant.keras.xquant",
}, globals())
