"""The package version, in a module of its own that imports nothing (metadata writers read it)."""
__version__ = "0.1.0"
