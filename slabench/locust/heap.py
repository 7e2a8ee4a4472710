"""A load generator's loop must not stop mid-run for a garbage collection that walks every object the process holds.

CPython's oldest generation holds what Locust, gevent, pydantic and slabench built at start-up (~80,000 objects),
and a full collection walks all of it with the event loop frozen: 100–200 ms, about every 5 s at 512 streams, and a
stream whose first token came meanwhile was stamped a packet late (docs/benchmarks.md, "The tail at scale"). So at
test start the process collects once (start-up's cyclic garbage) and freezes what is left: the collector no longer
visits it (reference counting still frees it). What the run keeps (~60 objects per stream, its users' clients and
in-flight requests: ~30,000 at 512 streams, a 10–15 ms walk) reaches a full collection after 1,000 middle ones
instead of 10, minutes apart instead of seconds; a request's own objects form no cycles (a test holds it), so
reference counting frees them without the collector. At test stop both are undone: a next run (the web UI's) starts
from a fresh collection.
"""

from __future__ import annotations

import gc
from typing import Any

FULL_AFTER = 1_000  # middle-generation collections between two full ones (CPython's default: 10)
_before: list[tuple[int, int, int]] = []  # the thresholds test start replaced, while a run holds them


def freeze_startup(**_: Any) -> None:
    """At test start, before any load: collect, move what is left out of the collector's sight, space the full
    collections out."""
    gc.collect()
    gc.freeze()
    if not _before:
        _before.append(gc.get_threshold())
    young, middle, _full = _before[0]
    gc.set_threshold(young, middle, FULL_AFTER)


def unfreeze(**_: Any) -> None:
    """At test stop: the frozen objects are the collector's again (a cycle among them can be freed), and the
    thresholds are what they were."""
    gc.unfreeze()
    if _before:
        gc.set_threshold(*_before.pop())
