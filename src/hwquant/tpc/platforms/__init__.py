"""The shipped target platforms and `get_target_platform_capabilities`."""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from hwquant.constants import DEFAULT_TPC_VERSION, IMX500_TPC, QNNPACK_TPC, TFLITE_TPC
from hwquant.errors import InvalidTPCError
from hwquant.tpc.platforms import imx500, qnnpack, tflite
from hwquant.tpc.schema import TargetPlatformCapabilities

# device type -> (versions, builder)
PLATFORMS: Dict[str, Tuple[Tuple[str, ...], Callable[[str], TargetPlatformCapabilities]]] = {
    IMX500_TPC: (imx500.VERSIONS, imx500.get_tpc),
    TFLITE_TPC: (tflite.VERSIONS, tflite.get_tpc),
    QNNPACK_TPC: (qnnpack.VERSIONS, qnnpack.get_tpc),
}
_FRAMEWORKS = ("pytorch", "tensorflow", "keras")
# Older platform/version names of the (framework, platform, version) signature.
_OLD_PLATFORM_NAMES = {"default": IMX500_TPC}
_OLD_VERSION_NAMES = {None: DEFAULT_TPC_VERSION, "latest": DEFAULT_TPC_VERSION, "v1": "1.0", "v1_lut": "1.0_lut"}
# IMX500 converter (SDSP) version -> the TPC version it runs.
SDSP_TO_TPC_VERSION = {"3.14": "1.0", "3.16": "4.0", "3.17": "5.0", "3.18": "5.0"}


def get_target_platform_capabilities(tpc_version: Any = DEFAULT_TPC_VERSION, device_type: str = IMX500_TPC,
                                     target_platform_version: Optional[str] = None,
                                     extended_version: Optional[str] = None) -> TargetPlatformCapabilities:
    """The TPC of a shipped platform: `device_type` in imx500 / tflite / qnnpack, `tpc_version` such as '1.0'
    (IMX500: 1.0, 4.0, 5.0, 6.0, and edge-mdt-tpc's 4.1 and 1.0 with `extended_version='lut'`, also
    spelled '1.0_lut'). Also accepts the older call `get_target_platform_capabilities('pytorch', 'imx500', 'v1')`.
    """
    if isinstance(tpc_version, str) and tpc_version.lower() in _FRAMEWORKS:
        # Older signature: (framework name, platform name, platform version).
        device_type = _OLD_PLATFORM_NAMES.get(device_type, device_type)
        if target_platform_version not in _OLD_VERSION_NAMES:
            raise InvalidTPCError(f"TPC version '{target_platform_version}' is not available; use one of "
                                  f"{[v for v in _OLD_VERSION_NAMES if v]} or the current call "
                                  "get_target_platform_capabilities(tpc_version='1.0', device_type='imx500')")
        tpc_version = _OLD_VERSION_NAMES[target_platform_version]
    if device_type not in PLATFORMS:
        raise InvalidTPCError(f"device type '{device_type}' is not known; available: {', '.join(PLATFORMS)}")
    versions, build = PLATFORMS[device_type]
    version = str(tpc_version)
    if version.isdigit():  # '4' means '4.0'
        version += ".0"
    if extended_version is not None:  # edge-mdt-tpc's spelling of '1.0_lut'
        version = f"{version}_{extended_version}"
    if version not in versions:
        raise InvalidTPCError(f"{device_type} has no TPC version '{tpc_version}'; available: {', '.join(versions)}")
    return build(version)


def get_target_platform_capabilities_sdsp(sdsp_version: Any = "3.14") -> TargetPlatformCapabilities:
    """The IMX500 TPC that a given IMX500 converter (SDSP) version runs, e.g. '3.16' -> TPC 4.0."""
    version = str(sdsp_version)
    if version not in SDSP_TO_TPC_VERSION:
        raise InvalidTPCError(f"IMX500 converter (SDSP) version '{sdsp_version}' is not known; available: "
                              f"{', '.join(SDSP_TO_TPC_VERSION)}")
    return get_target_platform_capabilities(SDSP_TO_TPC_VERSION[version], IMX500_TPC)
