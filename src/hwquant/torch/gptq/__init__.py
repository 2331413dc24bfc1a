"""GPTQ for PyTorch: the configuration, the facade and the training loop (hwquant.gptq holds the framework-free parts)."""
