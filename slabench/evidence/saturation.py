"""Signs that the load generator ran out of CPU while a run went on (local runner or master).

Latencies measured on a starved machine measure the machine: a stream's chunks wait in the kernel until the event
loop gets the CPU back, and an open-loop request goes out late. The watch counts what Locust itself sees (its
5-second CPU samples above 90 %, per process, and the master's flag for its workers), how late open-loop requests
went out, and how late the load generator's event loop ran (`slabench.evidence.starvation`: a process kept off the
cores by others uses little CPU itself, so Locust's check misses it); `run_status.json` carries the figures, and the SLA
contract's `measurement` policy judges them.
"""

from __future__ import annotations

from typing import Any

from slabench.core.record import RequestRecord
from slabench.evidence.run_status import Saturation
from slabench.evidence.starvation import Starvation, StarvationMeter

LATE_BOUND_S = 0.25  # an open-loop request sent later than this after its schedule was held back by the machine


class SaturationWatch:
    def __init__(self, environment: Any, late_bound_s: float = LATE_BOUND_S) -> None:
        self.env = environment
        self.late_bound_s = late_bound_s
        self.starvation = StarvationMeter()  # this process's; a worker sends its own with its final batch
        self.reset()
        environment.events.cpu_warning.add_listener(self._on_cpu_warning)

    def reset(self) -> None:
        # With an in-flight cap (--open-loop-max-in-flight) a late send is the cap's doing when it binds, not the
        # machine's: the event loop's own lateness (below) still tells a starved machine.
        opts = getattr(self.env, "parsed_options", None)
        self.capped = bool(getattr(opts, "open_loop_max_in_flight", 0) or 0)
        self.cpu_samples = 0
        self.open_loop = 0
        self.late = 0
        self.starvation.start()
        self.starvation.run_ticker()

    def _on_cpu_warning(self, cpu_usage: float = 0.0, **_: Any) -> None:
        self.cpu_samples += 1

    def observe(self, r: RequestRecord) -> None:
        if r.scheduled is not None and r.sent is not None:
            self.open_loop += 1
            if r.sent - r.scheduled > self.late_bound_s and not self.capped:
                self.late += 1

    def snapshot(self, workers: dict[str, Starvation] | None = None) -> Saturation:
        """`workers` (master): each worker's starvation; the one whose loop ran late the longest share stands for
        the run. Local runner: this process's own."""
        runner = self.env.runner
        where, s = max((workers or {"": self.starvation.read()}).items(), key=lambda kv: kv[1].late_share)
        return Saturation(
            cpu_samples_over_90=self.cpu_samples,
            worker_cpu_over_90=bool(getattr(runner, "worker_cpu_warning_emitted", False)),
            late_sends=self.late,
            open_loop_sends=self.open_loop,
            late_bound_s=self.late_bound_s,
            loop_where=where,
            **{k: v for k, v in s.as_dict().items() if k != "stalls"},  # stalls: run_status.json's own list
        )
