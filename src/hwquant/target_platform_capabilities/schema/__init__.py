"""`mct.target_platform_capabilities.schema`: the current schema is `mct_current_schema`."""
from hwquant.target_platform_capabilities.schema import mct_current_schema  # noqa: F401
