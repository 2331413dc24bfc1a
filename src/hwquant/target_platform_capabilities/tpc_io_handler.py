"""`mct.target_platform_capabilities.tpc_io_handler` (MCT's module of that name): a TPC to and from JSON."""
from hwquant.tpc.serialization import export_target_platform_capabilities, load_target_platform_capabilities  # noqa: F401 (re-exported)
