"""MCT's package `model_compression_toolkit.xquant.keras` (a framework-free table)."""
from hwquant.xquant.keras import facade_xquant_report  # noqa: F401 (MCT's attribute path)
