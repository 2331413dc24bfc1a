"""What hwquant's calls share between threads, in one place (docs/guide/threads.md).

- ContextStack: the `with` blocks of the older TPC APIs (`with fqc:`, `with TargetPlatformModel(...)`)
  are per thread: a block one thread opens is not another thread's.
- FRAMEWORK_STATE: some of what hwquant asks of torch changes torch's process-wide settings for as long
  as it runs, and with them what every other thread computes:
  - torch.export switches oneDNN and NNPACK off (other threads' convolutions then take torch's reference
    kernels, which round differently) and raises torch.compiler's "compiling" flag (torch.optim's
    optimisers then take another code path: GPTQ, data generation and pruning train with them);
  - torch.onnx's exporter raises its "exporting" flag and keeps its state in module globals;
  - torch.fx patches torch.nn.Module.__call__ and __getattr__ (other threads' calls pass through
    hwquant's tracer, torch/capture/routes.py) and raises its own tracing flag.
  So every public torch call holds FRAMEWORK_STATE shared (`@framework_call`), and each of those steps
  holds it exclusively (`with FRAMEWORK_STATE.exclusive:`): it waits until no other call computes, and no
  call computes until it is done. Keras calls hold it exclusively throughout (KERAS_LOCK): Keras' and
  TensorFlow's own global state (its layer-name counters, the torch backend's torch calls) is not
  made for concurrent use; run concurrently on TensorFlow, one stress run in 14 went wrong.
- torch's random generator is process-wide: no call draws from it (hwquant's random choices have their
  own seeded generators; layers it makes are made on the meta device, without a random initialisation),
  so a quantization changes neither the caller's random numbers nor another thread's.
- Grad mode is per thread: what needs gradients (mixed-precision probes) enables them itself.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Callable, Dict, List, Optional, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class ContextStack(threading.local):
    """A stack of open `with` blocks, one per thread."""

    def __init__(self) -> None:
        self.items: List[Any] = []

    def push(self, item: Any) -> None:
        self.items.append(item)

    def pop(self, item: Any) -> None:
        self.items.remove(item)

    def top(self) -> Optional[Any]:
        return self.items[-1] if self.items else None


class SharedExclusiveLock:
    """Held by many threads at once (``with lock.shared:``) or by one alone (``with lock.exclusive:``).

    Both are reentrant per thread. A thread that holds it shared and asks for it exclusively gives its
    shared hold up while it waits (two such threads would otherwise wait for each other) and takes it back
    when its exclusive section ends. A waiting exclusive request keeps new shared holders out, so it is not
    starved by a stream of calls; holders already inside go on (their nested shared requests pass)."""

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._shared: Dict[int, int] = {}  # thread -> depth of its shared holds
        self._owner: Optional[int] = None  # the thread holding it exclusively
        self._depth = 0
        self._suspended = 0  # the owner's shared depth, given up while it holds it exclusively
        self._waiting = 0  # exclusive requests waiting
        self.shared = _Hold(self._enter_shared, self._exit_shared)
        self.exclusive = _Hold(self._enter_exclusive, self._exit_exclusive)

    def _enter_shared(self) -> None:
        me = threading.get_ident()
        with self._condition:
            if self._owner == me:
                self._depth += 1  # (shared inside exclusive: part of the exclusive hold)
                return
            if me in self._shared:
                self._shared[me] += 1
                return
            self._condition.wait_for(lambda: self._owner is None and not self._waiting)
            self._shared[me] = 1

    def _exit_shared(self) -> None:
        me = threading.get_ident()
        with self._condition:
            if self._owner == me:
                self._depth -= 1
                return
            self._shared[me] -= 1
            if not self._shared[me]:
                del self._shared[me]
                self._condition.notify_all()

    def _enter_exclusive(self) -> None:
        me = threading.get_ident()
        with self._condition:
            if self._owner == me:
                self._depth += 1
                return
            suspended = self._shared.pop(me, 0)
            if suspended:
                self._condition.notify_all()
            self._waiting += 1
            try:
                self._condition.wait_for(lambda: self._owner is None and not self._shared)
            finally:
                self._waiting -= 1
            self._owner, self._depth, self._suspended = me, 1, suspended

    def _exit_exclusive(self) -> None:
        with self._condition:
            self._depth -= 1
            if self._depth:
                return
            if self._suspended:  # back to the shared hold it had (a downgrade: nothing to wait for)
                self._shared[self._owner] = self._suspended  # type: ignore[index]
            self._owner, self._suspended = None, 0
            self._condition.notify_all()


class _Hold:
    """One way of holding a SharedExclusiveLock, usable in ``with`` by any number of threads."""

    def __init__(self, enter: Callable[[], None], leave: Callable[[], None]):
        self._enter, self._leave = enter, leave

    def __enter__(self) -> None:
        self._enter()

    def __exit__(self, *exc: Any) -> None:
        self._leave()


FRAMEWORK_STATE = SharedExclusiveLock()
KERAS_LOCK = FRAMEWORK_STATE.exclusive


def framework_call(function: F) -> F:
    """A public call that computes with the framework: it holds FRAMEWORK_STATE shared throughout."""
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        with FRAMEWORK_STATE.shared:
            return function(*args, **kwargs)
    return call  # type: ignore[return-value]


def keras_call(function: F) -> F:
    """A public Keras call: it holds FRAMEWORK_STATE exclusively throughout (KERAS_LOCK)."""
    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        with KERAS_LOCK:
            return function(*args, **kwargs)
    return call  # type: ignore[return-value]
