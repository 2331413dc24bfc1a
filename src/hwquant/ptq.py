"""`mct.ptq`: post-training quantization; each framework's facade loads on first use."""
from hwquant.lazy import lazy_table

__getattr__, __dir__ = lazy_table(__name__, {
    "pytorch_post_training_quantization": "hwquant.torch.facade",
    "keras_post_training_quantization": "hwquant.keras.facade",
})
