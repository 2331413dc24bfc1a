"""Schema version 2, MCT's `schema.v2`: the current schema (`mct_current_schema`)."""
from hwquant.target_platform_capabilities.schema.mct_current_schema import *  # noqa: F401,F403
from hwquant.target_platform_capabilities.schema.mct_current_schema import __all__  # noqa: F401
