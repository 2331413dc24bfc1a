"""Public namespace `mct.target_platform_capabilities` (mirrors the documented API): its names and module
paths are in the table of MCT's module paths, hwquant/mct_paths.py; constants.py and schema/v1.py hold code."""
from hwquant.lazy import served as _served

__getattr__, __dir__ = _served(__name__, globals())
