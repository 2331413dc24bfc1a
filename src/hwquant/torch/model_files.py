"""PyTorch model files read without running code they hold, unless trusted (the rule: hwquant.model_files).

- A whole pickled module (``torch.save(model)``, .pt / .pth): the names its pickle asks for are read first
  (``torch.serialization.get_unsafe_globals_in_checkpoint``, without unpickling); a name outside
  ``load_allowlist.model_class`` (a function such as ``posix.system``, a class of the user's own such as
  ``__main__.MyNet``) refuses the file before anything is built. The file is then read with
  ``torch.load(weights_only=True)``, the allowed classes added to torch's own list for that call only.
- A torch.export program (.pt2): ``torch.export.load`` unpickles payloads (some with weights_only=False),
  evaluates symbolic-shape expressions with sympy (Python's eval) and loads compiled AOTInductor code.
  ``check_exported_program`` reads the archive first and refuses anything beyond a plain exported program:
  compiled code, pickled objects, pickles torch's weights-only loader refuses, shape expressions beyond
  symbols, numbers and sympy's arithmetic, graph calls outside torch's operators, names that are not
  identifiers (fx writes them into the Python code it generates).

With ``trust=True`` both load as torch does, unchecked.
"""
from __future__ import annotations

import io
import json
import keyword
import pickle
import re
import zipfile
from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from hwquant.concurrency import FRAMEWORK_STATE
from hwquant.errors import UnsafeModelFileError
from hwquant.model_files import PT2_WAYS, TORCH_WAYS, names, refusal
from hwquant.torch.deployment import load_allowlist as allowlist

_GLOBAL_IN_ERROR = re.compile(r"GLOBAL ([\w.]+)")
# what torch's weights-only unpickler says when it refuses an object (not a malformed file)
_REFUSED = ("allowlisted", "Unsupported global", "unrecognized function", "persistent_load", "blocked")


def requested_globals(path: Any) -> Optional[List[str]]:
    """What a torch.save file's pickle names beyond torch's own weights-only list ('module.name'), read without
    unpickling; None where it cannot be read so (a legacy, non-zip file, or a PyTorch without the reader)."""
    reader = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)
    if reader is None or not zipfile.is_zipfile(path):
        return None
    try:
        return sorted(reader(path))
    except Exception:  # noqa: BLE001 - a zip that is not a torch.save checkpoint: torch.load says why
        return None


def _refuse_names(path: Any, asked: List[str]) -> UnsafeModelFileError:
    return refusal(path, f"is a pickle naming code that loading it would run or build ({names(asked)}), beyond the "
                         "torch.nn, torchvision and hwquant layer classes hwquant reads from one", TORCH_WAYS)


def load_pickled_model(path: Any, trust: bool = False, map_location: Any = "cpu") -> Any:
    """The object a torch.save file holds. Untrusted (the default): only tensors, plain data and the layer
    classes of ``load_allowlist.model_class``; UnsafeModelFileError, naming what the file asks for, before
    anything is built otherwise. ``trust=True``: torch.load with full pickle (runs any code the file holds)."""
    if trust:
        return torch.load(path, map_location=map_location, weights_only=False)
    asked = requested_globals(path)
    if asked is None:  # nothing to read ahead: torch's weights-only loader refuses any other name itself
        classes = list(allowlist.torch_layer_classes())
    else:
        refused = [name for name in asked if allowlist.model_class(name) is None]
        if refused:
            raise _refuse_names(path, refused)
        classes = [allowlist.model_class(name) for name in asked]
    # (torch.serialization.safe_globals changes a process-wide list: the load runs alone, concurrency.py)
    with FRAMEWORK_STATE.exclusive, torch.serialization.safe_globals(classes):
        try:
            return torch.load(path, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as e:
            found = _GLOBAL_IN_ERROR.findall(str(e))
            if found:
                raise _refuse_names(path, sorted(set(found))) from None
            said = (str(e).partition("WeightsUnpickler error:")[2].strip() or str(e)).splitlines()[0][:200]
            if "persistent_load" in said and not zipfile.is_zipfile(path):
                raise refusal(path, "is in torch.save's legacy (non-zip) format, whose pickle of a module cannot be "
                                    "read without running it", TORCH_WAYS) from None
            if any(word in said for word in _REFUSED):
                raise refusal(path, f"holds what torch's weights-only loader refuses ({said})", TORCH_WAYS) from None
            raise pickle.UnpicklingError(said) from None  # not a pickle torch can read at all


# ---- torch.export programs (.pt2) -------------------------------------------------------------------------------
# higher-order operators that only run subgraphs of the same file (checked the same way)
_HIGHER_ORDER = frozenset({"cond", "while_loop", "map_impl", "scan", "wrap_with_set_grad_enabled", "wrap_with_autocast"})
# operators that reach files, raw memory or other processes: never in an inference graph
_DENIED_OPS = frozenset({"from_file", "save", "load", "_load", "set_", "_set_", "record_stream", "share_memory_",
                         "_share_memory_", "_cpu_lock", "storage", "untyped_storage"})
# shape expressions (sympy's srepr): numbers, symbols (s0, u1, ps2...), these functions and assumption keywords,
# quoted symbol names and numbers; sympy.sympify evaluates them with Python's eval
_SYMPY_NAMES = frozenset("""
    FloorDiv ModularIndexing Where PythonMod Mod CleanDiv CeilToInt FloorToInt CeilDiv LShift RShift PowByNatural
    FloatPow FloatTrueDiv IntTrueDiv IsNonOverlappingAndDenseIndicator TruncToFloat TruncToInt RoundToInt
    RoundDecimal ToFloat Identity Max Min Eq Ne Lt Le Gt Ge StrictLessThan StrictGreaterThan LessThan GreaterThan
    Equality Unequality And Or Not Abs floor ceiling sqrt Piecewise ITE Symbol Dummy Integer Rational Float Mul Add
    Pow Half One Zero NegativeOne Infinity NegativeInfinity BooleanTrue BooleanFalse true false True False oo zoo nan
    precision positive negative nonnegative nonpositive integer real finite infinite zero nonzero even odd rational
    commutative
""".split())
_SYM_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)|([A-Za-z_]\w*)|'([^']*)'|\"([^\"]*)\"|"
                        r"(\*\*|<=|>=|==|!=|[-+*/%(),<>~&|^=]))")
_SYMBOL = re.compile(r"[a-z]{1,4}\d+\Z")
_NUMBER = re.compile(r"[-+]?\d+(\.\d*)?([eE][-+]?\d+)?\Z")
_FQN = re.compile(r"[\w.\-]*\Z")  # module paths: fx quotes a part that is not an identifier
_MAX_EXPRESSION = 4096


def _sympy_problem(text: Any) -> Optional[str]:
    if not isinstance(text, str) or len(text) > _MAX_EXPRESSION:
        return f"a shape expression of {len(str(text))} characters"
    position = 0
    while position < len(text.rstrip()):
        match = _SYM_TOKEN.match(text, position)
        if match is None or match.end() == position:
            return f"the shape expression {text[:60]!r}"
        word, quoted = match.group(2), match.group(3) if match.group(3) is not None else match.group(4)
        if word is not None and not (_SYMBOL.match(word) or word in _SYMPY_NAMES):
            return f"the shape expression {text[:60]!r} (names {word!r})"
        if quoted is not None and not (_SYMBOL.match(quoted) or _NUMBER.match(quoted)):
            return f"the shape expression {text[:60]!r} (quotes {quoted[:20]!r})"
        position = match.end()
    return None


def _operator_problem(target: Any) -> Optional[str]:
    """Why a graph call's target is refused, or None: torch's registered operators (not those reaching files or
    memory), the listed higher-order operators, torch's symbolic-size functions, and load_allowlist's operator /
    math functions."""
    if not isinstance(target, str):
        return f"a call of {target!r:.60}"
    parts = target.split(".")
    if target.startswith("torch.ops.") and all(p.isidentifier() and not p.startswith("__") for p in parts):
        obj: Any = torch
        try:
            for part in parts[1:]:
                obj = getattr(obj, part, None)
        except Exception:  # noqa: BLE001 - an operator namespace refusing the name: not a registered operator
            obj = None
        if isinstance(obj, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            op = obj._schema.name if isinstance(obj, torch._ops.OpOverload) else obj._qualified_op_name
            if op.split("::")[-1] not in _DENIED_OPS:
                return None
        elif isinstance(obj, torch._ops.HigherOrderOperator) and parts[2] == "higher_order" \
                and parts[-1] in _HIGHER_ORDER:
            return None
    elif re.fullmatch(r"torch\._?sym_\w+", target) and callable(getattr(torch, parts[1], None)):
        return None
    elif target.startswith(("_operator.", "operator.", "math.")) and allowlist.resolve_function(target) is not None:
        return None
    return f"a call of {target[:80]}"


def _walk(value: Any, key: str = "") -> Iterator[Tuple[str, Any]]:
    """(key, value) of every dict entry in a JSON document, depth first; list items under their list's key."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k, v
            yield from _walk(v, k)
    elif isinstance(value, list):
        for item in value:
            if not isinstance(item, (dict, list)):
                yield key, item
            yield from _walk(item, key)


def program_problems(document: Dict[str, Any]) -> List[str]:
    """What in an exported program's JSON (models/NAME.json of a .pt2 archive) torch.export.load would evaluate
    or call beyond a plain graph of torch operators."""
    problems = []
    for key, value in _walk(document):
        problem = None
        if key == "expr_str":  # sympy.sympify: Python's eval
            problem = _sympy_problem(value)
        elif key in ("target", "as_operator"):  # resolved by attribute from torch, then called
            problem = _operator_problem(value)
        elif key in ("name", "as_name", "forward_arg_names") and isinstance(value, str) and value:  # fx's code
            if not value.isidentifier() or keyword.iskeyword(value):
                problem = f"the name {value!r:.60}"
        elif (key.endswith(("_name", "fqn"))) and isinstance(value, str) and not _FQN.match(value):
            problem = f"the module path {value!r:.60}"
        if problem and problem not in problems:
            problems.append(problem)
    return problems


def _weights_only(data: bytes) -> Optional[str]:
    """None when torch's weights-only loader reads `data` (a torch.save payload); else why not."""
    try:
        torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        return None
    except Exception as e:  # noqa: BLE001 - whatever it refuses
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:160]


def exported_program_problems(path: Any) -> List[str]:
    """Why torch.export.load could run code from the .pt2 archive at `path` (an empty list: a plain exported
    program). Reads the archive, runs nothing of it."""
    from torch.export.pt2_archive import constants as c

    problems: List[str] = []
    with zipfile.ZipFile(path) as archive:
        entries = archive.namelist()
        roots = {name.split("/", 1)[0] for name in entries}
        if len(roots) != 1 or not all("/" in name for name in entries):
            return ["an archive layout torch.export.save does not write"]
        root = roots.pop() + "/"
        files = {name[len(root):]: name for name in entries if not name.endswith("/")}

        def read(name: str) -> bytes:
            return archive.read(files[name])

        if c.ARCHIVE_FORMAT_PATH not in files:
            return ["the older torch.export format (no archive_format record): save it again with torch.export.save"]
        for name in files:
            if name.startswith((c.AOTINDUCTOR_DIR, c.EXECUTORCH_DIR, c.MTIA_DIR, c.XL_MODEL_WEIGHTS_DIR)):
                problems.append(f"compiled or foreign code ({name})")
            elif not (name in (c.ARCHIVE_FORMAT_PATH, c.ARCHIVE_VERSION_PATH, "byteorder")
                      or name.startswith((".data/", c.MODELS_DIR, c.WEIGHTS_DIR, c.CONSTANTS_DIR, c.SAMPLE_INPUTS_DIR,
                                          c.EXTRA_DIR))):
                problems.append(f"an entry torch.export.save does not write ({name})")
            elif name.startswith(c.CONSTANTS_DIR) and name[len(c.CONSTANTS_DIR):].startswith(
                    (c.CUSTOM_OBJ_FILENAME_PREFIX, c.OPAQUE_OBJ_FILENAME_PREFIX)):
                problems.append(f"a pickled Python object ({name})")
            elif name.endswith(".pt"):  # sample inputs, legacy weights / constants: read with a weights_only fallback
                why = _weights_only(read(name))
                if why:
                    problems.append(f"a pickle torch's weights-only loader refuses ({name}: {why})")
        for name in files:
            if not (name.startswith(c.MODELS_DIR) and name.endswith(".json")):
                continue
            model = name[len(c.MODELS_DIR):-len(".json")]
            try:
                problems += program_problems(json.loads(read(name)))
            except ValueError as e:
                problems.append(f"an unreadable program ({name}: {e})")
            for config_name, folder in ((c.WEIGHTS_CONFIG_FILENAME_FORMAT.format(model), c.WEIGHTS_DIR),
                                        (c.CONSTANTS_CONFIG_FILENAME_FORMAT.format(model), c.CONSTANTS_DIR)):
                if config_name not in files:
                    continue
                try:
                    payloads = json.loads(read(config_name)).get("config", {})
                except (ValueError, AttributeError) as e:
                    problems.append(f"an unreadable payload list ({config_name}: {e})")
                    continue
                for meta in payloads.values():  # payloads torch.export.load unpickles with weights_only=False
                    if isinstance(meta, dict) and meta.get("use_pickle"):
                        payload = folder + str(meta.get("path_name"))
                        why = _weights_only(read(payload)) if payload in files else "missing"
                        if why:
                            problems.append(f"a pickle torch's weights-only loader refuses ({payload}: {why})")
    return problems


def check_exported_program(path: Any) -> None:
    """Refuse (UnsafeModelFileError) a .pt2 file torch.export.load could run code from."""
    try:
        problems = exported_program_problems(path)
    except (zipfile.BadZipFile, KeyError, OSError) as e:
        raise refusal(path, f"cannot be checked as a torch.export archive ({type(e).__name__}: {e})",
                      PT2_WAYS) from None
    except ImportError:
        problems = ["a torch.export archive this PyTorch cannot check (torch.export.pt2_archive missing)"]
    if problems:
        raise refusal(path, f"holds what torch.export.load would run or unpickle ({names(problems, 3)})", PT2_WAYS)


def load_exported_program(path: Any, trust: bool = False) -> Any:
    """torch.export.load of a .pt2 file, checked first unless trusted (UnsafeModelFileError)."""
    if not trust:
        check_exported_program(path)
    with FRAMEWORK_STATE.exclusive:  # (torch.export may switch process-wide settings: concurrency.py)
        return torch.export.load(path)
