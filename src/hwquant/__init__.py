"""hwquant: hardware-aware model compression.

    import hwquant as mct
    tpc = mct.get_target_platform_capabilities("4.0", "imx500")
    core_config = mct.core.CoreConfig(mct.core.QuantizationConfig(z_threshold=16))

The public namespaces mirror the documented Model Compression Toolkit API.
"""
from hwquant import (constants, core, data_generation, exporter, gptq, ptq, qat, target_platform,  # noqa: F401,E402
                     pruning, target_platform_capabilities, trainable_infrastructure, wrapper, xquant)
from hwquant.core import (CoreConfig, DefaultDict, FrameworkInfo, QuantizationConfig,  # noqa: F401,E402
                          QuantizationErrorMethod, ThresholdSelectionMethod)
from hwquant.lazy import lazy_table  # noqa: E402
from hwquant.logger import set_log_folder, set_progress_bars  # noqa: F401,E402
from hwquant.tpc import QuantizationMethod, get_target_platform_capabilities, get_target_platform_capabilities_sdsp  # noqa: F401,E402
from hwquant.version import __version__  # noqa: F401
from hwquant.wrapper import MCTWrapper  # noqa: F401,E402

__getattr__, _ = lazy_table("hwquant", {"keras_load_quantized_model": "hwquant.keras.facade"})
