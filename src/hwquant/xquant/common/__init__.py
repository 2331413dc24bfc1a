"""MCT's package `model_compression_toolkit.xquant.common`."""
from hwquant.xquant.common import xquant_config  # noqa: F401 (MCT's attribute path)
