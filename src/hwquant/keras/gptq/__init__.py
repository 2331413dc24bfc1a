"""Keras 3's GPTQ: its quantizers, losses, config and the back end of the framework-free loop (gptq/training.py)."""
