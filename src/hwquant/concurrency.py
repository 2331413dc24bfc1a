"""What hwquant's calls share between threads, in one place (README: "Threads").

- ContextStack: the `with` blocks of the older TPC APIs (`with fqc:`, `with TargetPlatformModel(...)`)
  are per thread: a block one thread opens is not another thread's.
- CAPTURE_LOCK: torch.fx patches torch.nn.Module.__call__ and __getattr__ process-wide while it
  traces, and restores them when it ends; two captures at once would restore each other's patches, so
  captures take turns, and so do ONNX / TorchScript exports (torch.onnx keeps its exporting state in
  module globals). Other threads' models run meanwhile: the tracer passes their calls through
  (torch/capture.py).
- torch's random generator is process-wide: no call draws from it (hwquant's random choices have their
  own seeded generators; layers it makes are made on the meta device, without a random initialisation),
  so a quantization changes neither the caller's random numbers nor another thread's.
- Grad mode is per thread: what needs gradients (mixed-precision probes) enables them itself.
- KERAS_LOCK: Keras quantization calls take turns. Run concurrently on Keras' TensorFlow backend, one
  stress run in 14 went wrong (cause not found: Keras' and TensorFlow's own global state are candidates);
  serialised, none did.
"""
from __future__ import annotations

import threading
from typing import Any, List, Optional


class ContextStack(threading.local):
    """A stack of open `with` blocks, one per thread."""

    def __init__(self):
        self.items: List[Any] = []

    def push(self, item: Any) -> None:
        self.items.append(item)

    def pop(self, item: Any) -> None:
        self.items.remove(item)

    def top(self) -> Optional[Any]:
        return self.items[-1] if self.items else None


CAPTURE_LOCK = threading.RLock()
KERAS_LOCK = threading.RLock()
