"""Native thread primitives for pytest-xdist's worker, which gevent's monkey-patching would otherwise break.

An xdist worker waits for its next test on an Event that execnet's receiver, a native thread, sets. Once
conftest.py (or Locust's import) has patched `threading`, a new Event is gevent's, which another native thread
cannot wake: the worker dies with gevent's LoopExit before its first test. So, before patching, the worker takes a
private copy of the `threading` module (bound to the native `_thread`) and has execnet build its locks and events
from that copy.
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

from execnet import gateway_base


def _native_threading() -> ModuleType:
    spec = importlib.util.find_spec("threading")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its globals keep the native _thread functions that patching later replaces
    return module


def keep_execnet_native() -> None:
    """Call before gevent's monkey.patch_all(): execnet's locks and events stay native thread ones."""
    native = _native_threading()
    gateway_base.ThreadExecModel.RLock = lambda self: native.RLock()  # type: ignore[method-assign]
    gateway_base.ThreadExecModel.Event = lambda self: native.Event()  # type: ignore[method-assign]
