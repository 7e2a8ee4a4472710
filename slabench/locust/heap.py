"""A load generator's loop must not stop mid-run for a garbage collection that walks every object the process holds.

CPython's oldest generation holds what Locust, gevent, pydantic and slabench built at start-up (~80,000 objects),
and a full collection walks all of it with the event loop frozen: 50–85 ms of CPU (80–260 ms on a busy machine), one
to three times in 10 s at 512–1,024 streams, and a stream whose first token came meanwhile was stamped a packet late
(docs/benchmarks.md, "The tail at scale"). So once Locust has started (init), and again after each run (test stop,
for the web UI's next), the process collects (the cycles among what it holds) and freezes what is left: the
collector no longer visits it (reference counting still frees it). Not at test start: a worker's clock of its own
lateness (`slabench.evidence.starvation`) already runs then, and the collection holds the loop 50–200 ms. What the
run keeps (~60 objects per stream, its users' clients and in-flight requests: ~30,000 at 512 streams, a 10–15 ms
walk) reaches a full collection after 1,000 middle ones instead of 10, minutes apart instead of seconds; a request's
own objects form no cycles (a test holds it), so reference counting frees them without the collector. A middle
collection walks what the last `MIDDLE_AFTER` young ones left (a request lives longer than the ~70 ms between young
collections at 512 streams, so nearly all of it): after 4 instead of 10 it held the loop 1.7 ms of CPU (median)
instead of 3.9, at most 5.4 instead of 7.9.
"""

from __future__ import annotations

import gc
from typing import Any

MIDDLE_AFTER = 4  # young collections between two middle ones (CPython's default: 10)
FULL_AFTER = 1_000  # middle collections between two full ones (CPython's default: 10)


def settle(**_: Any) -> None:
    """Collect everything (what an earlier settle froze too), freeze what is left, make the middle collections
    smaller and the full ones rare."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    gc.set_threshold(gc.get_threshold()[0], MIDDLE_AFTER, FULL_AFTER)
