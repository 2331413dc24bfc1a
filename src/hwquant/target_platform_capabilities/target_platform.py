"""`...target_platform_capabilities.target_platform`: older module path of the same classes."""
from hwquant.target_platform import *  # noqa: F401,F403
