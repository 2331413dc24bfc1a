"""hwquant: hardware-aware model compression.

    import hwquant as mct
    tpc = mct.get_target_platform_capabilities("4.0", "imx500")
    core_config = mct.core.CoreConfig(mct.core.QuantizationConfig(z_threshold=16))

The public namespaces mirror the documented Model Compression Toolkit API; MCT's module paths that are not
hwquant's own packages (mct.target_platform, mct.qat.keras.quantizer..., mct.core.common...) are served from
one table, hwquant/mct_paths.py: each is an attribute of its package, imported on first use.
"""
from hwquant import mct_paths as _mct_paths
from hwquant.lazy import serve_modules as _serve_modules

_serve_modules(_mct_paths.MODULES, _mct_paths.__file__)  # first: the imports below reach table modules
from hwquant import (constants, core, data_generation, exporter, gptq, ptq, qat,  # noqa: F401,E402
                     pruning, target_platform_capabilities, trainable_infrastructure, wrapper, xquant, yolo)
from hwquant.core import (CoreConfig, DefaultDict, FrameworkInfo, QuantizationConfig,  # noqa: F401,E402
                          QuantizationErrorMethod, ThresholdSelectionMethod)
from hwquant.lazy import lazy_table  # noqa: E402
from hwquant.logger import set_log_folder, set_progress_bars  # noqa: F401,E402
from hwquant.tpc import QuantizationMethod, get_target_platform_capabilities, get_target_platform_capabilities_sdsp  # noqa: F401,E402
from hwquant.version import __version__  # noqa: F401,E402
from hwquant.wrapper import MCTWrapper  # noqa: F401,E402

__getattr__, _ = lazy_table("hwquant", {"keras_load_quantized_model": "hwquant.keras.facade"})
