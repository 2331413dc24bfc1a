"""`hwquant.yolo`: Ultralytics YOLO models of any scale to Sony's IMX500 (export_imx500), through Ultralytics'
own exporter with hwquant's quantization; loads PyTorch and Ultralytics on first use."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "export_imx500": "hwquant.torch.yolo_imx500",
    "Imx500Export": "hwquant.torch.yolo_imx500",
})
