"""The arithmetic of quantization: the one module that rounds and clips (quant_math), the integer
kernels' exact accumulation, small array helpers."""
