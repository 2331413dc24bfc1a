"""`mct.target_platform_capabilities.schema`: the current schema is `mct_current_schema`; `v1` and `v2`
are the numbered versions MCT's TPC modules import."""
from hwquant.target_platform_capabilities.schema import mct_current_schema, v1, v2  # noqa: F401
