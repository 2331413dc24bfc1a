"""`mct.target_platform_capabilities.schema`: the current schema is `mct_current_schema`; `v1` and `v2` are the
numbered versions MCT's TPC modules import. Its names: the table of MCT's module paths, hwquant/mct_paths.py
(v1.py holds code: the schema at version 1)."""
from hwquant.lazy import served as _served

__getattr__, __dir__ = _served(__name__, globals())
