"""MCT's module `model_compression_toolkit.xquant.keras.facade_xquant_report`: the Keras report facades."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "xquant_report_keras_experimental": "hwquant.keras.xquant",
    "xquant_report_troubleshoot_keras_experimental": "hwquant.keras.xquant",
}, globals())
