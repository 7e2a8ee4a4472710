"""Was the load generator's event loop on time? Measured the way it would show in latencies.

A stream's chunk is stamped when the event loop gets to it; a closed-loop user sends its next request when the loop
gets back to it. A loop held up — by a busy process, or by other processes that keep it off the cores — stamps late
and sends late. Locust's own check (its CPU above 90 %) sees the first kind only. Beside a vLLM server on the same
two cores, a Locust process at 4–7 % CPU had its loop stalled for up to 1.25 s at a time, 31–45 % of a 10 s run,
and its users idled between requests the server could have served (docs/sla.md).

`StarvationMeter` keeps a greenlet that asks to wake every 50 ms and adds up how late it woke (wake-ups more than
5 ms late): the loop's lateness, whatever its cause. Where Linux says (`/proc/self/schedstat`: time the main thread,
which runs the loop, was ready to run but waited for a CPU), the wait for a CPU is kept beside it, naming the cause.
A wake-up more than `STALL_S` late is a stall: the process was frozen (a CPU-throttled pod, SIGSTOP, a swap storm)
and every request it had in flight then waited with it, so its window is kept (`stalls`, in the process's
`time.perf_counter` clock, the clock of its records' `sent` and `end`) for the analysis to leave those requests out of
the latency figures. Cost: 20 wake-ups a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import gevent

SCHEDSTAT = Path("/proc/self/schedstat")
TICK_S = 0.05
LATE_S = 0.005  # a wake-up this much later than asked is late
STALL_S = 0.25  # ... and this much later, a stall: what was in flight waited with the process


@dataclass(frozen=True)
class Starvation:
    """One process over one run: its event loop's late wake-ups, and its wait for a CPU (0 runs: not measured)."""

    loop_late_s: float  # in all, over the wake-ups more than LATE_S late
    loop_late_max_s: float
    loop_span_s: float  # named as run_status.json's saturation fields, which take these as they are
    cpu_wait_s: float = 0.0
    cpu_wait_runs: int = 0  # times it got a CPU
    stalls: tuple[tuple[float, float], ...] = ()  # (from, to) of each wake-up more than STALL_S late (perf_counter)

    @property
    def late_share(self) -> float:
        return self.loop_late_s / self.loop_span_s if self.loop_span_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_schedstat(path: Path = SCHEDSTAT) -> tuple[int, int] | None:
    """(ns waited for a CPU, times it got one), or None where the kernel does not say."""
    try:
        _, waited, runs = path.read_text().split()[:3]
        return int(waited), int(runs)
    except (OSError, ValueError):
        return None


class StarvationMeter:
    """This process's starvation since `start()` (call it at the run's start; the ticker runs from then on)."""

    def __init__(self, schedstat: Path = SCHEDSTAT, only_while: Callable[[], bool] | None = None) -> None:
        self.schedstat = schedstat
        self.only_while = only_while  # count a wake-up only if this held when its wait began
        self._ticker: gevent.Greenlet | None = None
        self.start()

    def start(self) -> None:
        self._late = self._max = 0.0
        self._stalls: list[tuple[float, float]] = []
        self._t0 = time.monotonic()
        self._cpu0 = read_schedstat(self.schedstat)
        self._frozen: Starvation | None = None

    def freeze(self) -> None:
        """The load has stopped: what follows (stopping users, closing the records) is not measurement."""
        if self._frozen is None:
            self._frozen = self._now()

    def run_ticker(self) -> None:
        if self._ticker is None or self._ticker.dead:
            self._ticker = gevent.spawn(self._tick)

    def _tick(self) -> None:
        clock, only_while = time.perf_counter, self.only_while
        while True:
            t = clock()
            counts = only_while is None or only_while()
            gevent.sleep(TICK_S)
            woke = clock()
            late = woke - t - TICK_S
            if late > LATE_S and counts:
                self._late += late
                self._max = max(self._max, late)
                if late > STALL_S:
                    self._stalls.append((t + TICK_S, woke))

    def read(self) -> Starvation:
        """Since `start()`, up to `freeze()` if the run has stopped."""
        return self._frozen or self._now()

    def _now(self) -> Starvation:
        cpu, cpu0 = read_schedstat(self.schedstat), self._cpu0
        waited, runs = (0.0, 0) if cpu is None or cpu0 is None else ((cpu[0] - cpu0[0]) / 1e9, cpu[1] - cpu0[1])
        return Starvation(self._late, self._max, time.monotonic() - self._t0, waited, runs, tuple(self._stalls))
