"""The Horizontal Pod Autoscaler's arithmetic for a KEDA external metric, and a fluid queue of vLLM replicas it
scales: enough to see where a scaling rule settles under a steady load, a ramp, a burst and idleness.

HPA (AverageValue target on an external metric, as KEDA's prometheus trigger): usage ratio = metric ÷ (target ×
current replicas); within the tolerance (0.1) of 1 nothing changes, else desired = ⌈metric ÷ target⌉. Then the
chart's behaviour (`Autoscaler`): up by at most one replica per `up_period_s`, down only to the highest
recommendation of the last `down_window_s` and by at most one per `down_period_s`; always within [min, max].

The queue: requests arrive at `rate(t)` per second and each holds a slot for `service_s`; a ready replica runs up to
`max_num_seqs` at once, the rest wait. A new replica serves after `startup_s` (a node, the image, the model load).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

TOLERANCE = 0.1


def desired_replicas(current: int, metric: float, target: float, tolerance: float = TOLERANCE) -> int:
    """The HPA's recommendation for an external metric with an AverageValue target."""
    if current <= 0:
        return math.ceil(metric / target) if metric > 0 else 0
    ratio = metric / (target * current)
    if abs(ratio - 1.0) <= tolerance:
        return current
    return math.ceil(metric / target)


@dataclass(frozen=True)
class Rule:
    """A scaling rule: which series it sums and its per-replica target."""

    counts_running: bool  # running + waiting (load), or waiting alone (the queue)
    target: float

    def metric(self, running: float, waiting: float) -> float:
        return running + waiting if self.counts_running else waiting


@dataclass(frozen=True)
class Fleet:
    max_num_seqs: int = 64
    service_s: float = 15.0
    startup_s: float = 300.0
    min_replicas: int = 1
    max_replicas: int = 4
    poll_s: float = 15.0
    up_period_s: float = 120.0
    down_window_s: float = 600.0
    down_period_s: float = 300.0


@dataclass
class Trace:
    t: list[float] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)  # desired (spec) replicas
    ready: list[int] = field(default_factory=list)
    running: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)

    def since(self, t0: float) -> Trace:
        i = next((k for k, t in enumerate(self.t) if t >= t0), len(self.t))
        return Trace(self.t[i:], self.replicas[i:], self.ready[i:], self.running[i:], self.waiting[i:])


class Autoscaler:
    """The HPA's behaviour around its recommendation, as the chart configures it: up by at most one replica per
    `up_period_s`, down only to the highest recommendation of the last `down_window_s` and by at most one per
    `down_period_s` (`up_pods`, `down_pods`: the chart's Pods policies); always within [min, max]. Call `decide` at
    every poll."""

    def __init__(
        self,
        rule: Rule,
        replicas: int,
        min_replicas: int,
        max_replicas: int,
        up_period_s: float,
        down_window_s: float,
        down_period_s: float,
        up_pods: int = 1,
        down_pods: int = 1,
    ) -> None:
        self.rule = rule
        self.replicas = replicas
        self.min_replicas, self.max_replicas = min_replicas, max_replicas
        self.up_period_s, self.down_window_s, self.down_period_s = up_period_s, down_window_s, down_period_s
        self.up_pods, self.down_pods = up_pods, down_pods
        self.wanted = replicas  # the last recommendation, within [min, max], before the policies
        self.recommended = replicas  # the last recommendation before [min, max]
        self._last_up = self._last_down = -math.inf
        self._recommendations: list[tuple[float, int]] = []

    def decide(self, t: float, running: float, waiting: float, ready: int) -> int:
        """The replica count after the poll at `t`."""
        # no ready replica, no series: nothing to act on (KEDA reads it as 0 with ignoreNullValues)
        r = self.replicas
        want = desired_replicas(r, self.rule.metric(running, waiting), self.rule.target) if ready else r
        self.recommended = want
        want = max(self.min_replicas, min(self.max_replicas, want))
        self.wanted = want
        self._recommendations = [(rt, w) for rt, w in self._recommendations if t - rt < self.down_window_s]
        self._recommendations.append((t, want))
        if want > r and t - self._last_up >= self.up_period_s:
            self.replicas, self._last_up = min(want, r + self.up_pods), t
        elif want < r and t - self._last_down >= self.down_period_s:
            stabilized = max(w for _, w in self._recommendations)
            if stabilized < r:
                self.replicas, self._last_down = max(stabilized, r - self.down_pods), t
        return self.replicas


def simulate(rule: Rule, rate: Callable[[float], float], duration_s: float, fleet: Fleet = Fleet()) -> Trace:
    """Replicas and queue every poll interval, from `min_replicas` ready and an empty queue."""
    f = fleet
    hpa = Autoscaler(
        rule, f.min_replicas, f.min_replicas, f.max_replicas, f.up_period_s, f.down_window_s, f.down_period_s
    )
    started = [-f.startup_s] * f.min_replicas  # start times of the replicas (ready after startup_s)
    in_system = 0.0
    trace = Trace()
    t = 0.0
    while t <= duration_s:
        ready = sum(1 for s in started if t - s >= f.startup_s)
        running = min(in_system, ready * f.max_num_seqs)
        waiting = in_system - running
        replicas = hpa.decide(t, running, waiting, ready)
        if replicas > len(started):
            started.append(t)
        elif replicas < len(started):
            started.pop()  # the newest goes first
        trace.t.append(t)
        trace.replicas.append(replicas)
        trace.ready.append(ready)
        trace.running.append(running)
        trace.waiting.append(waiting)
        # the queue over the next interval: arrivals in, completions out (each running request ends after service_s)
        in_system = max(0.0, in_system + rate(t) * f.poll_s - running * f.poll_s / f.service_s)
        t += f.poll_s
    return trace
