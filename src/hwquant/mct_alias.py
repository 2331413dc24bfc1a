"""Run code written for Sony's Model Compression Toolkit, unchanged, on hwquant: after `enable()`,
`import model_compression_toolkit` and every `model_compression_toolkit.<path>` import in this process
give hwquant's module at `hwquant.<path>` (the very same module object, so classes compare equal).

Downstream packages import MCT by name (Ultralytics' IMX500 export, edge-mdt-tpc's TPC modules); this is
how they reach hwquant without editing them. Nothing is installed and no distribution's name is taken:
`importlib.metadata.version("model-compression-toolkit")` still says whether the real MCT is installed,
and the alias exists only in a process that asks for it:

    import hwquant.mct_alias
    hwquant.mct_alias.enable()
    from ultralytics import YOLO
    YOLO("yolo11n.pt").export(format="imx", data="my_images.yaml")

or, for a program started from the command line, `python -m hwquant.mct_alias PROGRAM ARGS...`, where
PROGRAM is a console script (`yolo`), a Python file, or `-m module`:

    YOLO_AUTOINSTALL=False python -m hwquant.mct_alias yolo export model=yolo11n.pt format=imx data=my.yaml

mct-quantizers, the package MCT's quantized models are made of, is a dependency of hwquant and stays itself
(hwquant's PyTorch model is built from its classes). One function of it is redirected while the alias is on:
`mct_quantizers.keras_load_quantized_model` loads hwquant's quantized Keras 3 models, on any Keras backend
(mct-quantizers' own reads TensorFlow 2.15 Keras models only, hwquant's Keras layers are hwquant's).

Ultralytics checks the installed distribution `model-compression-toolkit` and, unless YOLO_AUTOINSTALL is
False (or ULTRALYTICS_SKIP_REQUIREMENTS_CHECKS is set), pip-installs the real MCT, whose dependencies can
replace the installed torch. The launcher sets YOLO_AUTOINSTALL=False for the program it runs when neither
is set, and says so.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading
from types import ModuleType
from typing import List, Optional, Sequence

from hwquant.errors import HwquantError

ALIAS = "model_compression_toolkit"
TARGET = "hwquant"

log = logging.getLogger("hwquant")
_lock = threading.Lock()


def _is_alias(name: str) -> bool:
    return name == ALIAS or name.startswith(ALIAS + ".")


def _target_name(alias_name: str) -> str:
    return TARGET + alias_name[len(ALIAS):]


class _MctAliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds `model_compression_toolkit[.x.y]` and loads it as the already-importable `hwquant[.x.y]`."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None, target: Optional[ModuleType] = None):
        if not _is_alias(fullname):
            return None
        real = _target_name(fullname)
        try:
            found = importlib.util.find_spec(real)
        except ModuleNotFoundError:
            found = None
        if found is None:
            raise ModuleNotFoundError(
                f"No module named '{fullname}': in this process model_compression_toolkit is hwquant "
                f"(hwquant.mct_alias), and hwquant has no module '{real}'. If your code needs this part of MCT, "
                "please report it; to run the real MCT instead, do not enable the alias", name=fullname)
        return importlib.machinery.ModuleSpec(fullname, self, origin=found.origin,
                                              is_package=found.submodule_search_locations is not None)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(_target_name(spec.name))
        spec.loader_state = module.__spec__  # the import system replaces it with `spec`: kept to put back
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The module ran when hwquant imported it. Give it its own spec back, so that it keeps saying
        # where it comes from (hwquant.x and its file), whichever name reached it first.
        original = getattr(module.__spec__, "loader_state", None)
        if original is not None:
            module.__spec__ = original


_finder = _MctAliasFinder()

MCTQ = "mct_quantizers"
# mct_quantizers' modules holding keras_load_quantized_model, and the function each held before enable()
_MCTQ_LOADER_MODULES = (MCTQ, MCTQ + ".keras.load_model")
_mctq_originals: dict = {}


def keras_load_quantized_model(filepath, custom_objects=None, compile=True, options=None):
    """`mct_quantizers.keras_load_quantized_model` while the alias is on: hwquant's loader
    (`mct.keras_load_quantized_model`, MCT's signature)."""
    return importlib.import_module("hwquant.keras.facade").keras_load_quantized_model(
        filepath, custom_objects=custom_objects, compile=compile, options=options)


def _redirect_mct_quantizers() -> None:
    """Point the loaded mct_quantizers modules' keras_load_quantized_model to hwquant's."""
    for name in _MCTQ_LOADER_MODULES:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "keras_load_quantized_model", None) is not keras_load_quantized_model:
            _mctq_originals.setdefault(name, getattr(module, "keras_load_quantized_model", None))
            module.__dict__["keras_load_quantized_model"] = keras_load_quantized_model


class _AfterExec(importlib.abc.Loader):
    """mct_quantizers' own loader, then the redirection (the package loads as it always does)."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _redirect_mct_quantizers()

    def __getattr__(self, name: str):
        if name == "_loader":
            raise AttributeError(name)
        return getattr(self._loader, name)


class _MctQuantizersHook(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when `mct_quantizers` is first imported with the alias on, it hands the
    package's own spec out with a loader that redirects keras_load_quantized_model once it has run."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None, target: Optional[ModuleType] = None):
        if fullname != MCTQ:
            return None
        for finder in sys.meta_path:
            if finder is self or finder is _finder or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _AfterExec(spec.loader)
                return spec
        return None


_mctq_hook = _MctQuantizersHook()


def is_enabled() -> bool:
    return _finder in sys.meta_path


def enable() -> None:
    """Make `model_compression_toolkit` resolve to hwquant in this process (idempotent).

    Raises HwquantError if the real MCT is already imported: two toolkits under one name would mix their
    classes; enable the alias before anything imports model_compression_toolkit."""
    with _lock:
        if is_enabled():
            return
        loaded = sys.modules.get(ALIAS)
        if loaded is not None and getattr(loaded, "__name__", None) != TARGET:
            raise HwquantError(
                f"model_compression_toolkit is already imported in this process (from "
                f"{getattr(loaded, '__file__', '?')}): call hwquant.mct_alias.enable() before anything imports "
                "it, or run the program with `python -m hwquant.mct_alias ...`")
        import hwquant

        sys.meta_path.insert(0, _finder)
        sys.meta_path.insert(0, _mctq_hook)
        _redirect_mct_quantizers()  # (if mct_quantizers is loaded already; else when it loads)
        log.info("model_compression_toolkit resolves to hwquant %s in this process (hwquant.mct_alias)",
                 hwquant.__version__)


def disable() -> None:
    """Undo `enable()`: forget the alias and the module names it created (hwquant's modules stay loaded)."""
    with _lock:
        for hook in (_finder, _mctq_hook):
            if hook in sys.meta_path:
                sys.meta_path.remove(hook)
        for name, original in _mctq_originals.items():
            module = sys.modules.get(name)
            if module is not None and original is not None:
                module.__dict__["keras_load_quantized_model"] = original
        _mctq_originals.clear()
        for name in [n for n in sys.modules if _is_alias(n)]:
            if getattr(sys.modules[name], "__name__", "").startswith(TARGET):
                del sys.modules[name]


def main(argv: Optional[List[str]] = None) -> int:
    """`python -m hwquant.mct_alias PROGRAM ARGS...`: run PROGRAM with the alias enabled."""
    import runpy
    from importlib.metadata import entry_points

    args = list(sys.argv[1:] if argv is None else argv)
    usage = ("usage: python -m hwquant.mct_alias PROGRAM [ARGS...]\n"
             "  PROGRAM: a console script (e.g. yolo), a Python file, or -m MODULE;\n"
             "  model_compression_toolkit resolves to hwquant while it runs")
    if not args or args[0] in ("-h", "--help"):
        print(usage, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    if "YOLO_AUTOINSTALL" not in os.environ and not os.environ.get("ULTRALYTICS_SKIP_REQUIREMENTS_CHECKS"):
        os.environ["YOLO_AUTOINSTALL"] = "False"
        log.warning("YOLO_AUTOINSTALL was not set: set to False for this run, so that Ultralytics does not "
                    "pip-install the real model-compression-toolkit over hwquant (set it yourself to silence this)")
    enable()
    if args[0] == "-m":
        if len(args) < 2:
            print(usage, file=sys.stderr)
            return 2
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return 0
    program, rest = args[0], args[1:]
    if os.path.isfile(program):
        sys.argv = [program, *rest]
        runpy.run_path(program, run_name="__main__")
        return 0
    script = next((ep for ep in entry_points(group="console_scripts") if ep.name == program), None)
    if script is None:
        print(f"hwquant.mct_alias: '{program}' is neither a file nor an installed console script (`pip show` the "
              f"package that provides it)\n{usage}", file=sys.stderr)
        return 2
    sys.argv = [program, *rest]
    result = script.load()()
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
