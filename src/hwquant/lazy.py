"""Public namespaces as thin tables: a name resolves to the module that defines it on first use.

`import hwquant` imports neither torch nor keras; `mct.ptq.pytorch_post_training_quantization` imports
hwquant.torch when it is first read. Every public name resolves in every install, as MCT's do: where its
framework is not installed, the name is a stand-in of the same name (a function, or a class for a class's
name) that raises MissingFrameworkError, saying which extra to install, when it is called. So a module
that imports the names of both frameworks imports fine with one of them installed.

MCT's other module paths (mct.qat.keras.quantizer..., mct.core.common..., mct.target_platform, ...) are one
table, hwquant/mct_paths.py; :class:`ModuleTable`, a meta-path finder and loader, makes each of its modules
when it is imported, an empty module whose names resolve in the same way.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any, Callable, Dict, Iterator, List, NoReturn, Optional, Sequence, Tuple

from hwquant.errors import HwquantError

# the top-level module of each framework package -> the pip extra that installs it
_EXTRA_OF = {"torch": "torch", "keras": "keras", "tensorflow": "keras", "onnx": "onnx", "onnxruntime": "onnx"}
# every lazy table, by namespace ({name: defining module}); filled as the namespaces are imported (a module
# made from the table of module paths lists its names whose home is a framework package)
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


def resolve(namespace: str, name: str, module: str, attr: Optional[str] = None) -> Any:
    """``getattr(import module, attr or name)``; where the module's framework is not installed, the name's
    stand-in."""
    try:  # (hwquant.torch and hwquant.keras import their framework first: a missing one fails here)
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = (e.name or "").split(".")[0]
        if top not in _EXTRA_OF:
            raise
        return stand_in(namespace, name, top)
    return getattr(loaded, attr or name)


def lazy_table(namespace: str, table: Dict[str, str], module_globals: Optional[Dict[str, Any]] = None) -> tuple:
    """(``__getattr__``, ``__dir__``) for a module whose names in ``table`` ({name: defining module})
    load on first use; ``module_globals``: the module's own (its public names are listed too)."""
    TABLES.setdefault(namespace, {}).update(table)

    def __getattr__(name: str) -> Any:
        if name in table:
            return resolve(namespace, name, table[name])
        if name in _table_children(namespace):  # (mct.qat.keras: the table of MCT's module paths)
            return importlib.import_module(f"{namespace}.{name}")
        raise AttributeError(f"module {namespace!r} has no attribute {name!r}")

    def __dir__() -> List[str]:
        own = (module_globals or {}).items()
        return sorted(set(table) | {n for n, v in own if not n.startswith("_") and not isinstance(v, ModuleType)
                                    and v is not lazy_table})
    return __getattr__, __dir__


# ------------------------------------------------------------------ modules made from a table of module paths
# A path entry naming a package whose child modules the table holds: packages list it in their __path__, so
# that pkgutil.iter_modules / walk_packages see the children the table makes (_TableEntry below).
TABLE_ENTRY = "hwquant.mct_paths:"
_FRAMEWORK_PACKAGES = ("hwquant.torch.", "hwquant.keras.")


def home_of(entry: str) -> Tuple[str, Optional[str]]:
    """(module, attribute) of a table entry: "pkg.mod" (the name itself, returned as None), "pkg.mod:attr",
    or "pkg.mod:" (the module: attribute "")."""
    module, colon, attr = entry.partition(":")
    return module, (attr if colon else None)


class ModuleTable(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and makes the modules of a table {module: {name: home}} (hwquant/mct_paths.py says the forms):
    each is an empty module whose names resolve on first use (PEP 562 ``__getattr__``), with its child
    modules in the table as attributes. A table module that has a file of its own is left to its file, which
    takes its names with :func:`served`. Packages holding table modules get TABLE_ENTRY + their name on
    their ``__path__``."""

    def __init__(self, modules: Dict[str, Dict[str, str]], origin: str):
        self.modules = modules
        self.origin = origin
        self.children: Dict[str, List[str]] = {}
        for name in modules:
            parent, _, leaf = name.rpartition(".")
            self.children.setdefault(parent, []).append(leaf)

    def _on_disk(self, fullname: str, path: Optional[Sequence[str]]) -> Optional[importlib.machinery.ModuleSpec]:
        if path is None and "." in fullname:  # (the import system gives a child its parent's __path__: never
            path = getattr(sys.modules.get(fullname.rpartition(".")[0]), "__path__", None)  # sys.path)
            if path is None:
                return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        # (a folder left without files, such as a stale __pycache__, is a namespace portion: not a module)
        return spec if spec is not None and spec.loader is not None and spec.loader is not self else None

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None, target: Optional[ModuleType] = None):
        if fullname not in self.modules and fullname not in self.children:
            return None
        found = self._on_disk(fullname, path)
        if found is None:
            return self.spec(fullname) if fullname in self.modules else None
        if fullname in self.children and found.submodule_search_locations is not None:
            found.submodule_search_locations.append(TABLE_ENTRY + fullname)
        return found

    def spec(self, fullname: str) -> importlib.machinery.ModuleSpec:
        spec = importlib.machinery.ModuleSpec(fullname, self, origin=self.origin)
        if fullname in self.children:
            spec.submodule_search_locations = [TABLE_ENTRY + fullname]
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return None  # an ordinary module

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        module.__doc__ = (f"MCT's module `model_compression_toolkit{name[len('hwquant'):]}`: its names resolve on "
                          "first use to hwquant's objects (the table of MCT's module paths, hwquant/mct_paths.py).")
        getattr_, dir_ = self.attributes(name, vars(module))
        vars(module).update(__getattr__=getattr_, __dir__=dir_)

    def attributes(self, namespace: str, module_globals: Dict[str, Any]) -> Tuple[Callable[[str], Any],
                                                                                  Callable[[], List[str]]]:
        """(``__getattr__``, ``__dir__``) of the table module ``namespace``."""
        names = {n: home for n, home in self.modules.get(namespace, {}).items() if n != "*"}
        star = self.modules.get(namespace, {}).get("*")
        children = self.children.get(namespace, [])
        TABLES.setdefault(namespace, {}).update(
            {n: home_of(home)[0] for n, home in names.items() if home.startswith(_FRAMEWORK_PACKAGES)})

        def exported() -> List[str]:  # __all__: its names (modules left out), a star's home's __all__
            own = [n for n, home in names.items() if home_of(home)[1] != ""]
            return own + list(getattr(importlib.import_module(star), "__all__", ())) if star else own

        def __getattr__(name: str) -> Any:
            if name in names:
                module, attr = home_of(names[name])
                return importlib.import_module(module) if attr == "" else resolve(namespace, name, module, attr)
            if name in children:
                return importlib.import_module(f"{namespace}.{name}")
            if name == "__all__":
                return exported()
            if star and not name.startswith("__"):
                home = importlib.import_module(star)
                if name in getattr(home, "__all__", ()):
                    return getattr(home, name)
            raise AttributeError(f"module {namespace!r} has no attribute {name!r}")

        def __dir__() -> List[str]:
            own = [n for n, v in module_globals.items() if not n.startswith("_") and not isinstance(v, ModuleType)]
            return sorted(set(names) | set(children) | set(exported()) | set(own))
        return __getattr__, __dir__


class _TableEntry:
    """The path-entry finder of TABLE_ENTRY + package: its table modules, for the import system's path
    search and for pkgutil's listing (iter_modules)."""

    def __init__(self, package: str):
        self.package = package

    def find_spec(self, fullname: str, target: Optional[ModuleType] = None):
        # (asked after the package's folders: no file of that name there)
        for table in _tables():
            if fullname in table.modules and fullname.rpartition(".")[0] == self.package:
                return table.spec(fullname)
        return None

    def iter_modules(self, prefix: str = "") -> Iterator[Tuple[str, bool]]:
        for table in _tables():
            for leaf in sorted(table.children.get(self.package, ())):
                yield prefix + leaf, f"{self.package}.{leaf}" in table.children


def _tables() -> List[ModuleTable]:
    """The tables served in this process (the finders on sys.meta_path)."""
    return [f for f in sys.meta_path if isinstance(f, ModuleTable)]


def _table_children(package: str) -> List[str]:
    """The names of the served tables' modules in ``package``: its attributes, imported on first use."""
    return [leaf for table in _tables() for leaf in table.children.get(package, ())]


def _table_entry_hook(entry: str) -> _TableEntry:
    if not entry.startswith(TABLE_ENTRY):
        raise ImportError(f"not a table entry: {entry!r}")
    return _TableEntry(entry[len(TABLE_ENTRY):])


def serve_modules(modules: Dict[str, Dict[str, str]], origin: str) -> ModuleTable:
    """Make the modules of ``modules`` importable from now on (``origin``: the table's file, their specs'
    origin; a table served before from the same origin is replaced). hwquant/__init__.py serves
    hwquant/mct_paths.py."""
    for finder in _tables():
        if finder.origin == origin:
            sys.meta_path.remove(finder)
    table = ModuleTable(modules, origin)
    sys.meta_path.insert(0, table)  # ahead of the path search: a folder left behind must not shadow a module
    if _table_entry_hook not in sys.path_hooks:
        sys.path_hooks.insert(0, _table_entry_hook)
    for package in table.children:  # packages imported already (hwquant itself) list their table modules
        path = getattr(sys.modules.get(package), "__path__", None)
        if isinstance(path, list) and TABLE_ENTRY + package not in path:
            path.append(TABLE_ENTRY + package)
    return table


def served(namespace: str, module_globals: Optional[Dict[str, Any]] = None) -> tuple:
    """(``__getattr__``, ``__dir__``) for a module of a served table that has a file of its own (a package
    holding modules with code): its names come from the table as a made module's do."""
    for table in _tables():
        if namespace in table.modules:
            return table.attributes(namespace, module_globals or {})
    raise HwquantError(f"{namespace}: no table of module paths served in this process lists it (import hwquant first)")
