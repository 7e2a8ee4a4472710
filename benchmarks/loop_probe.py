"""A locustfile with no users, loaded beside another (`-f locustfiles/chat_replay.py,benchmarks/loop_probe.py`):
it times the Locust process's event loop while users run, and writes what it saw to $LOOP_PROBE_OUT as JSON at quit.

- every garbage collection: its generation, wall and CPU milliseconds (`gc.callbacks`);
- every stall: a greenlet that sleeps `PERIOD_S` at a time notes how much later than asked it woke, and the thread's
  CPU time meanwhile — CPU close to the wall time is this process's own work holding the loop (a collection, many
  streams' events in one wake-up); far less is the process waiting for a core on a busy machine.

Only the time from the end of spawning until the test stops counts (start-up's imports and collections are not
the run's).
"""

from __future__ import annotations

import gc
import json
import os
import time
from typing import Any

import gevent
from locust import events

PERIOD_S = 0.005
_gc: list[tuple[int, float, float]] = []  # generation, wall s, CPU s
_stalls: list[tuple[float, float, float]] = []  # when (perf_counter), late by (s), CPU meanwhile (s)
_state: dict[str, Any] = {"on": False}


def _on_gc(phase: str, info: dict[str, int]) -> None:
    if phase == "start":
        _state["gc"] = (time.perf_counter(), time.thread_time())
    elif _state["on"] and "gc" in _state:
        wall, cpu = _state["gc"]
        _gc.append((info["generation"], time.perf_counter() - wall, time.thread_time() - cpu))


def _watch() -> None:
    while True:
        wall, cpu = time.perf_counter(), time.thread_time()
        gevent.sleep(PERIOD_S)
        if _state["on"]:
            _stalls.append((wall, time.perf_counter() - wall - PERIOD_S, time.thread_time() - cpu))


@events.spawning_complete.add_listener
def _on(**_: Any) -> None:
    if not _state["on"] and "watch" not in _state:
        _state["watch"] = gevent.spawn(_watch)
    _state["on"] = True


@events.test_stopping.add_listener
@events.test_stop.add_listener
def _off(**_: Any) -> None:
    _state["on"] = False


@events.quitting.add_listener
def _write(**_: Any) -> None:
    if out := os.environ.get("LOOP_PROBE_OUT"):
        with open(out, "w") as f:
            json.dump({"gc": _gc, "stalls": _stalls}, f)


gc.callbacks.append(_on_gc)
