"""hwquant's PyTorch package: every line of torch code in hwquant lives here (the house rule,
docs/architecture.md). Loading it registers torch's arrays with core/numerics/quant_math.py."""
from hwquant.torch import array_namespace as _array_namespace  # noqa: F401 - registers the namespace
