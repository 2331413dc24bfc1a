"""Public namespaces as thin tables: a name resolves to the module that defines it on first use.

`import hwquant` imports neither torch nor keras; `mct.ptq.pytorch_post_training_quantization` imports
hwquant.torch when it is first read, and a user without that framework gets an error that says which
extra to install, instead of a bare ModuleNotFoundError from deep inside the package.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Dict, List, Optional

from hwquant.errors import HwquantError

# the top-level module of each framework package -> the pip extra that installs it
_EXTRA_OF = {"torch": "torch", "keras": "keras", "tensorflow": "keras", "onnx": "onnx", "onnxruntime": "onnx"}


class MissingFrameworkError(HwquantError, ImportError):
    """A public name whose framework is not installed."""


def resolve(namespace: str, name: str, module: str) -> Any:
    """``getattr(import module, name)``, with a missing framework said plainly."""
    try:  # (hwquant.torch and hwquant.keras import their framework first: a missing one fails here)
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top not in _EXTRA_OF:
            raise
        raise MissingFrameworkError(
            f"{namespace}.{name} needs {top}, which is not installed: pip install \"hwquant[{_EXTRA_OF[top]}]\" "
            f"(or install {top} yourself)") from e
    return getattr(loaded, name)


def lazy_table(namespace: str, table: Dict[str, str], module_globals: Optional[Dict[str, Any]] = None) -> tuple:
    """(``__getattr__``, ``__dir__``) for a module whose names in ``table`` ({name: defining module})
    load on first use; ``module_globals``: the module's own (its public names are listed too)."""
    def __getattr__(name: str) -> Any:
        if name in table:
            return resolve(namespace, name, table[name])
        raise AttributeError(f"module {namespace!r} has no attribute {name!r}")

    def __dir__() -> List[str]:
        own = (module_globals or {}).items()
        return sorted(set(table) | {n for n, v in own if not n.startswith("_") and not isinstance(v, ModuleType)
                                    and v is not lazy_table})
    return __getattr__, __dir__
