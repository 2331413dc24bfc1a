"""Keras 3 runs on its torch backend in the test suite (no TensorFlow needed), unless the environment
chooses another: set before any test module imports keras."""
import os

os.environ.setdefault("KERAS_BACKEND", "torch")

import pytest  # noqa: E402 - after the backend is chosen
from backend_kit import kits, make_kit  # noqa: E402


@pytest.fixture(params=kits())
def kit(request):
    """Each back end present (tests/backend_kit.py): a test taking it runs once per framework."""
    return make_kit(request.param)
