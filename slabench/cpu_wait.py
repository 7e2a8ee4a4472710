"""How long a process waited for a CPU while it was ready to run: Linux's scheduler statistics.

A load generator that loses the CPU to other processes stamps what arrived late, and its users send late, while its
own CPU use stays low: Locust's CPU check (> 90 % of a core) never sees it. A vLLM server on the same two cores
did this to Locust: 55 % of the run's wall time spent waiting for a CPU, 1.5 ms per wake-up on average, stalls of
over a second (its CPU use: 4 %). The kernel counts that wait per thread in `/proc/<pid>/schedstat` (time on a CPU,
time runnable but waiting, times it got a CPU); the event loop runs in the main thread, whose figures
`/proc/self/schedstat` gives. Elsewhere (macOS, Windows) nothing is measured.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

SCHEDSTAT = Path("/proc/self/schedstat")


@dataclass(frozen=True)
class CpuWait:
    """Over `span_s` of wall time, the process waited `wait_s` for a CPU, in `runs` spells of running."""

    wait_s: float
    runs: int
    span_s: float

    @property
    def per_run_ms(self) -> float:
        """How long it waited for a CPU, on average, each time it was ready to run: about how late its stamps are."""
        return 1e3 * self.wait_s / self.runs if self.runs else 0.0

    def as_dict(self) -> dict[str, float]:
        return {"wait_s": round(self.wait_s, 4), "runs": self.runs, "span_s": round(self.span_s, 3)}


def read_schedstat(path: Path = SCHEDSTAT) -> tuple[int, int] | None:
    """(ns waited for a CPU, times it got one), or None where the kernel does not say."""
    try:
        _, waited, runs = path.read_text().split()[:3]
        return int(waited), int(runs)
    except (OSError, ValueError):
        return None


class CpuWaitMeter:
    """This process's wait for a CPU since `start()`."""

    def __init__(self, path: Path = SCHEDSTAT) -> None:
        self.path = path
        self._start: tuple[int, int, float] | None = None

    def start(self) -> None:
        now = read_schedstat(self.path)
        self._start = None if now is None else (*now, time.monotonic())

    def read(self) -> CpuWait | None:
        now = read_schedstat(self.path)
        if self._start is None or now is None:
            return None
        waited, runs, t0 = self._start
        return CpuWait((now[0] - waited) / 1e9, now[1] - runs, time.monotonic() - t0)
