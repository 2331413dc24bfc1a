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


def _cpu_adds_int8_products_exactly() -> bool:
    """Whether ONNX Runtime's 8-bit integer kernels add every product exactly on this CPU. On x86 CPUs with AVX2
    but without VNNI, its u8 x s8 kernels add pairs of products in 16 bits first, which saturates for large
    activations and weights (the runtime's arithmetic, not the file's); VNNI and other architectures do not."""
    import platform
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return True
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return True
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & set(flags))


ORT_INTEGER_KERNELS_EXACT = _cpu_adds_int8_products_exactly()


@pytest.fixture(autouse=True, scope="session")
def _onnx_runtime_reference_kernels_where_integer_ones_saturate():
    """Tests compare exported files with the simulated model in ONNX Runtime. Where this CPU's integer kernels
    saturate (above), sessions run the file's QuantizeLinear / DequantizeLinear as written (optimisation level
    BASIC: no fusion into integer kernels), which is the function the file defines; the integer kernels themselves
    are then checked only on CPUs that add exactly (test_export_onnx's integer-kernel test says so when skipped).
    A session that asks for its optimised graph (optimized_model_filepath) keeps its level: it inspects the fusion."""
    if ORT_INTEGER_KERNELS_EXACT:
        yield
        return
    try:
        import onnxruntime as ort
    except ImportError:
        yield
        return
    original = ort.InferenceSession.__init__

    def reference_init(self, path_or_bytes, sess_options=None, *args, **kwargs):
        options = sess_options if sess_options is not None else ort.SessionOptions()
        if not options.optimized_model_filepath and \
                options.graph_optimization_level.value > ort.GraphOptimizationLevel.ORT_ENABLE_BASIC.value:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        original(self, path_or_bytes, options, *args, **kwargs)

    ort.InferenceSession.__init__ = reference_init
    yield
    ort.InferenceSession.__init__ = original
