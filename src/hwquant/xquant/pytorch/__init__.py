"""MCT's package `model_compression_toolkit.xquant.pytorch` (a framework-free table)."""
from hwquant.xquant.pytorch import facade_xquant_report  # noqa: F401 (MCT's attribute path)
