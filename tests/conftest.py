"""Keras 3 runs on its torch backend in the test suite (no TensorFlow needed), unless the environment
chooses another: set before any test module imports keras."""
import os

os.environ.setdefault("KERAS_BACKEND", "torch")
