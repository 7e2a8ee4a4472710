"""A test locustfile whose processes each have their own monotonic clock, hours apart — as workers on different hosts
do. The offset is applied to `time.perf_counter` itself (the clock seam every timestamp comes from), before slabench
is imported, and drawn per process (after Locust's --processes fork)."""

from __future__ import annotations

import os
import random
import time

_perf_counter = time.perf_counter
_OFFSETS: dict[int, float] = {}


def _skewed() -> float:
    pid = os.getpid()
    if pid not in _OFFSETS:
        _OFFSETS[pid] = random.Random(pid).uniform(1, 1000) * 3600.0  # hours to weeks ahead, per process
    return _perf_counter() + _OFFSETS[pid]


time.perf_counter = _skewed

from locustfiles.chat_replay import ChatReplayUser  # noqa: E402, F401 (after the clock is in place)
