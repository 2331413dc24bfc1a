"""Public namespaces as thin tables: a name resolves to the module that defines it on first use.

`import hwquant` imports neither torch nor keras; `mct.ptq.pytorch_post_training_quantization` imports
hwquant.torch when it is first read. Every public name resolves in every install, as MCT's do: where its
framework is not installed, the name is a stand-in of the same name (a function, or a class for a class's
name) that raises MissingFrameworkError, saying which extra to install, when it is called. So a module
that imports the names of both frameworks imports fine with one of them installed.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Dict, List, NoReturn, Optional, Tuple

from hwquant.errors import HwquantError

# the top-level module of each framework package -> the pip extra that installs it
_EXTRA_OF = {"torch": "torch", "keras": "keras", "tensorflow": "keras", "onnx": "onnx", "onnxruntime": "onnx"}
# every lazy table, by namespace ({name: defining module}); filled as the namespaces are imported
TABLES: Dict[str, Dict[str, str]] = {}
_STAND_INS: Dict[Tuple[str, str], Any] = {}
MISSING_ATTR = "__hwquant_missing_framework__"


class MissingFrameworkError(HwquantError, ImportError):
    """A public name whose framework is not installed."""


def _message(namespace: str, name: str, top: str) -> str:
    return (f"{namespace}.{name} needs {top}, which is not installed: pip install \"hwquant[{_EXTRA_OF[top]}]\" "
            f"(or install {top} yourself)")


def stand_in(namespace: str, name: str, top: str) -> Any:
    """What ``namespace.name`` is where ``top`` (a framework's package) is not installed: a function, or for
    a class's name (capitalised) a class that can be subclassed and named in ``isinstance`` / ``except``;
    calling either raises MissingFrameworkError naming the extra. One object per name."""
    key = (namespace, name)
    if key in _STAND_INS:
        return _STAND_INS[key]
    message = _message(namespace, name, top)
    doc = (f"Stand-in for {namespace}.{name}: {top} is not installed. Install it with "
           f"pip install \"hwquant[{_EXTRA_OF[top]}]\"; until then a call raises MissingFrameworkError.")

    def refuse(*args: Any, **kwargs: Any) -> NoReturn:
        raise MissingFrameworkError(message)

    obj: Any
    if name[:1].isupper():
        base = Exception if name.endswith(("Error", "Exception")) else object
        obj = type(name, (base,), {"__new__": refuse, "__doc__": doc, "__module__": namespace, MISSING_ATTR: top})
    else:
        obj = refuse
        obj.__name__ = obj.__qualname__ = name
        obj.__doc__, obj.__module__ = doc, namespace
        setattr(obj, MISSING_ATTR, top)
    return _STAND_INS.setdefault(key, obj)


def is_stand_in(obj: Any) -> bool:
    """Whether ``obj`` is a stand-in for a name whose framework is not installed."""
    return getattr(obj, MISSING_ATTR, None) is not None


def resolve(namespace: str, name: str, module: str) -> Any:
    """``getattr(import module, name)``; where the module's framework is not installed, the name's stand-in."""
    try:  # (hwquant.torch and hwquant.keras import their framework first: a missing one fails here)
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top not in _EXTRA_OF:
            raise
        return stand_in(namespace, name, top)
    return getattr(loaded, name)


def lazy_table(namespace: str, table: Dict[str, str], module_globals: Optional[Dict[str, Any]] = None) -> tuple:
    """(``__getattr__``, ``__dir__``) for a module whose names in ``table`` ({name: defining module})
    load on first use; ``module_globals``: the module's own (its public names are listed too)."""
    TABLES.setdefault(namespace, {}).update(table)

    def __getattr__(name: str) -> Any:
        if name in table:
            return resolve(namespace, name, table[name])
        raise AttributeError(f"module {namespace!r} has no attribute {name!r}")

    def __dir__() -> List[str]:
        own = (module_globals or {}).items()
        return sorted(set(table) | {n for n, v in own if not n.startswith("_") and not isinstance(v, ModuleType)
                                    and v is not lazy_table})
    return __getattr__, __dir__
