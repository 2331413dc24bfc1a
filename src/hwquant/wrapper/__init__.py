"""Public namespace `mct.wrapper`: MCT's one-call quantize-and-export wrapper."""
from hwquant.wrapper.mct_wrapper import MCTWrapper  # noqa: F401
