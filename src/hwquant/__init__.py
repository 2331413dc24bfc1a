"""hwquant: hardware-aware model compression."""
__version__ = "0.1.0"
