"""hwquant's Keras 3 package (any Keras backend: TensorFlow, PyTorch, JAX): every line of Keras code in
hwquant lives here (the house rule, docs/architecture.md). `import hwquant` does not load it; loading it
registers Keras' tensors with core/numerics/quant_math.py."""
from hwquant.keras import array_namespace as _array_namespace  # noqa: F401 - registers the namespace
