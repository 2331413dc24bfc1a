"""The package version, written only here: pyproject.toml reads it (setuptools' `attr`, without importing hwquant),
and so do the model metadata writers; a module of its own that imports nothing."""
__version__ = "0.1.0"
