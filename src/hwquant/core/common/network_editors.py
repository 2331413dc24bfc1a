"""MCT's `core.common.network_editors`: the node filters, edit rule and actions of `hwquant.core.network_editor`."""
from hwquant.core.network_editor import *  # noqa: F401,F403
from hwquant.core.network_editor import __all__  # noqa: F401
