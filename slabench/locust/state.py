"""slabench's state in a Locust process, kept off Locust's own objects: the current run's facts (`RunState`, owned by
the record hub), the parts that ride on a run and that other parts read (`Parts`: the scrape poller, the SLA hook,
the live view, the shape runtime), and which of slabench's modules are registered on an event hooks object
(`first_install`). Locust's environment, runner and hooks carry no attribute of slabench's."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from slabench.evidence.run_status import RunStatus

T = TypeVar("T")


@dataclass
class RunState:
    """What this process knows of the current (or last) run."""

    run_id: str = ""
    open: bool = False  # master/local: from the start until the whole finish (status, run_ended) is done
    emitted: int = 0  # records made in this process this run
    inflight: dict[str, dict[str, Any]] = field(default_factory=dict)  # requests in flight here, by request id
    status: RunStatus | None = None  # master/local: the last run's run_status.json


class Parts:
    """One object per type, put by the module that owns it and read by the others (typed: `get(SlaHook)` is a
    `SlaHook | None`), so no part needs an attribute on Locust's environment."""

    def __init__(self) -> None:
        self._parts: dict[type, object] = {}

    def put(self, part: object) -> None:
        self._parts[type(part)] = part

    def get(self, kind: type[T]) -> T | None:
        return cast("T | None", self._parts.get(kind))

    def pop(self, kind: type[T]) -> T | None:
        return cast("T | None", self._parts.pop(kind, None))


_installed: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def first_install(hooks: Any, name: str) -> bool:
    """True the first time `name` registers on `hooks` (Locust's events; several locustfiles may install it)."""
    done = _installed.setdefault(hooks, set())
    if name in done:
        return False
    done.add(name)
    return True
