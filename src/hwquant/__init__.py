"""hwquant: hardware-aware model compression.

    import hwquant as mct
    tpc = mct.get_target_platform_capabilities("4.0", "imx500")
    core_config = mct.core.CoreConfig(mct.core.QuantizationConfig(z_threshold=16))

The public namespaces mirror the documented Model Compression Toolkit API.
"""
__version__ = "0.1.0"

from hwquant import (constants, core, exporter, gptq, ptq, qat, target_platform,  # noqa: F401,E402
                     target_platform_capabilities, trainable_infrastructure, wrapper)
from hwquant.core import (CoreConfig, DefaultDict, FrameworkInfo, QuantizationConfig,  # noqa: F401,E402
                          QuantizationErrorMethod, ThresholdSelectionMethod)
from hwquant.logger import set_log_folder, set_progress_bars  # noqa: F401,E402
from hwquant.tpc import (QuantizationMethod, get_target_platform_capabilities,  # noqa: F401,E402
                         get_target_platform_capabilities_sdsp)
from hwquant.wrapper import MCTWrapper  # noqa: F401,E402


def __getattr__(name: str):
    # loads keras on first use: `import hwquant` needs neither keras nor tensorflow
    if name == "keras_load_quantized_model":
        from hwquant.keras.facade import keras_load_quantized_model
        return keras_load_quantized_model
    raise AttributeError(f"module 'hwquant' has no attribute '{name}'")
