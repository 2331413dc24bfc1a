"""MCT's `core.common` module paths that code written for MCT reaches (Ultralytics' IMX500 export calls
`mct.core.common.network_editors.NodeNameFilter`). hwquant keeps its own modules elsewhere; these names
lead to them."""
from hwquant.core.common import network_editors  # noqa: F401
