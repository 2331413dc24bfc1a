"""MCT's module `model_compression_toolkit.xquant.common.xquant_config` (its documented path of XQuantConfig)."""
from hwquant.xquant.config import XQuantConfig  # noqa: F401
