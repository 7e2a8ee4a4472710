"""Replay a load on a fleet the chart's autoscaling rule scales, in virtual time: `replay`'s engines and figures,
with replicas that come and go.

The fleet starts with `warm` replicas ready. Every `tick_s` the replay samples the fleet (replicas asked for, ready,
requests running and waiting over the ready replicas: the series KEDA's query sums); at every poll of the rule the
HPA's arithmetic (`slabench.deploy.hpa.Autoscaler`) decides the replica count. A replica added at t serves from
t + `startup_s` (the cold start of `slabench.plan.coldstart`); until then it takes no request and reports no series.
A replica removed while starting is cancelled; a ready one stops taking requests, finishes what it holds and goes.
Each replica is paid from the moment it is asked for (its node is launched for it) until it is gone.

The load balancer spreads arrivals over the ready replicas still taking requests, as `replay` does (round robin:
request i to the i mod n-th of the n serving; or least outstanding requests). Per-request figures, the early stop on
checks that have failed for sure, and the summary are `replay`'s own: from N warm replicas with N as the ceiling
(nothing can scale), a round-robin run's prediction is `replay`'s on N replicas, and its `rule_wanted` says whether
a higher ceiling would have changed anything (`ScaledRun.same_with_ceiling`).
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from slabench.plan.chart_rule import ScalingRule
from slabench.plan.checks import Check
from slabench.plan.coldstart import ColdStart
from slabench.plan.replay import BALANCERS, FleetReplay, Prediction, _FixedFleet, type7
from slabench.plan.workload import PlannedLoad
from slabench.sim.profiles import EngineConfig


@dataclass
class Timeline:
    """The fleet every `tick_s`: replicas asked for (the HPA's count), ready, and requests running and waiting over
    the ready replicas; `ttft_p95`, `e2e_p95`: those of the requests that arrived in the tick (None: none did)."""

    t: list[float] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)
    running: list[float] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)
    ttft_p95: list[float | None] = field(default_factory=list)
    e2e_p95: list[float | None] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "t_s": self.t,
            "replicas": self.replicas,
            "ready": self.ready,
            "running": self.running,
            "waiting": self.waiting,
            "ttft_p95_s": self.ttft_p95,
            "e2e_p95_s": self.e2e_p95,
        }


@dataclass
class ScaledRun:
    warm: int
    startup_s: float
    prediction: Prediction
    timeline: Timeline
    replica_seconds: float  # paid replica time, from each replica's request to its end
    peak_replicas: int  # the most replicas asked for at once
    scale_ups: int
    scale_downs: int
    flaps: int  # changes of direction soon after the last (`flaps`): an oscillating rule
    queue_drained_s: float  # from the first arrival until no request waits any more (inf: a queue to the end)
    attainment: dict[str, float]  # per TTFT/E2E percentile check: the share of requests within its target
    rule_wanted: int = 0  # the most replicas the rule recommended at any poll, before the floor and the ceiling

    def same_with_ceiling(self, ceiling: int) -> bool:
        """Whether this run is also the one with `ceiling` (≥ the warm replicas) as the most replicas: the rule
        never asked for more than the warm ones, so neither ceiling ever came into play."""
        return ceiling >= self.warm and self.rule_wanted <= self.warm

    def to_dict(self) -> dict[str, Any]:
        return {
            "warm": self.warm,
            "startup_s": self.startup_s,
            "replica_seconds": self.replica_seconds,
            "peak_replicas": self.peak_replicas,
            "scale_ups": self.scale_ups,
            "scale_downs": self.scale_downs,
            "flaps": self.flaps,
            "peak_load_per_replica": self.peak_load_per_replica,
            "queue_drained_s": self.queue_drained_s,
            "attainment": self.attainment,
            "prediction": self.prediction.to_dict(),
            "timeline": self.timeline.to_dict(),
        }

    @property
    def peak_load_per_replica(self) -> float:
        """The most requests running + waiting per ready replica at any tick: what the rule compares with its
        target."""
        tl = self.timeline
        return max(((r + w) / n for r, w, n in zip(tl.running, tl.waiting, tl.ready, strict=True) if n), default=0.0)


@dataclass(frozen=True)
class Scaling:
    """What a scaled replay needs besides the fleet and the load: the chart's rule and the cold start of a new
    replica (its weights from `tier`)."""

    rule: ScalingRule
    cold: ColdStart
    tier: str

    def startup_s(self, config: EngineConfig) -> float:
        return self.cold.seconds(self.tier, config.weight_bytes)


class _Replica:
    __slots__ = ("accepting", "asked", "ended", "ready_at")

    def __init__(self, asked: float, ready_at: float) -> None:
        self.asked = asked
        self.ready_at = ready_at
        self.accepting = True
        self.ended: float | None = None


class _ScaledFleet(FleetReplay):
    """`FleetReplay` on replicas the rule adds and removes; every `tick_s` a sample of the fleet, and at each of the
    rule's polls its decision."""

    def __init__(
        self,
        config: EngineConfig,
        load: PlannedLoad,
        rule: ScalingRule,
        startup_s: float,
        warm: int,
        balancer: str,
        checks: list[Check] | tuple[Check, ...],
        drain_timeout: float,
        tick_s: float,
        max_replicas: int | None,
    ) -> None:
        super().__init__(config, load, checks, drain_timeout)
        self.balancer, self.rule, self.startup_s, self.tick_s = balancer, rule, startup_s, tick_s
        t0 = self.origin = self.arrival[0] if self.n_max else 0.0
        self.now = t0
        # the warm fleet is the floor (minReplicas, or a cron trigger's desiredReplicas, set to it)
        self.hpa = rule.autoscaler(warm, warm, max(max_replicas or rule.max_replicas, warm))
        self.fleet: list[_Replica] = []
        for _ in range(warm):
            self.add_replica()
            self.fleet.append(_Replica(t0, t0))
        self.alive = list(range(warm))  # replicas asked for and not removed, oldest first
        self.starting: list[tuple[float, int]] = []  # (ready at, replica)
        self.serving: list[int] = list(range(warm))  # ready and taking requests
        self.outstanding: list[int] = [0] * warm
        self.sent_to: list[int] = [0] * warm
        self.rule_wanted = 0
        self.timeline = Timeline()
        self.poll_every = max(1, round(rule.poll_s / tick_s))
        self.tick = 0
        self.next_tick = t0
        self.tt = math.inf
        self.ups = self.downs = 0
        self.changes: list[tuple[float, int]] = []
        self.peak = warm

    def route(self, i: int) -> int:
        serving = self.serving
        if not serving:  # nothing ready (cannot happen from warm ≥ 1 with min ≥ 1)
            return -1
        if self.balancer == "round-robin":  # by the request's index, as `replay`: the same rotation on a fixed fleet
            k = serving[i % len(serving)]
        else:
            k = min(serving, key=lambda j: self.outstanding[j])
        self.outstanding[k] += 1
        self.sent_to[k] += 1
        return k

    def finished(self, k: int, count: int, t: float) -> None:
        self.outstanding[k] -= count
        rep = self.fleet[k]
        if not rep.accepting and self.outstanding[k] == 0 and rep.ended is None:
            rep.ended = t

    def next_extra(self, te: float, arrivals_left: bool) -> float:
        ts = self.starting[0][0] if self.starting else math.inf
        busy = arrivals_left or te < math.inf or self.starting
        self.tt = self.next_tick if busy else math.inf
        return min(ts, self.tt)

    def extra(self, t: float) -> None:
        if self.tt != t:  # a starting replica is ready
            _, k = heapq.heappop(self.starting)
            if self.fleet[k].accepting:
                self.serving.append(k)
            return
        # sample the fleet; at a poll, the HPA decides
        t0, fleet, timeline = self.origin, self.fleet, self.timeline
        ready_reps = [k for k, r in enumerate(fleet) if r.ended is None and r.ready_at <= t]
        running = waiting = 0.0
        for k in ready_reps:
            st = self.engines[k].stats()
            running += st["num_requests_running"]
            waiting += st["num_requests_waiting"]
        timeline.t.append(t - t0)
        timeline.ready.append(len(ready_reps))
        timeline.running.append(running)
        timeline.waiting.append(waiting)
        if self.tick % self.poll_every == 0:
            before = len(self.alive)
            after = self.hpa.decide(t - t0, running, waiting, len(ready_reps))
            self.rule_wanted = max(self.rule_wanted, self.hpa.recommended)
            if after != before:
                direction = 1 if after > before else -1
                self.ups += direction > 0
                self.downs += direction < 0
                self.changes.append((t, direction))
                self.scale_to(after, t)
                self.peak = max(self.peak, after)
        timeline.replicas.append(len(self.alive))
        self.tick += 1
        self.next_tick = t0 + self.tick * self.tick_s

    def scale_to(self, target: int, t: float) -> None:
        alive, fleet = self.alive, self.fleet
        while len(alive) < target:
            k = self.add_replica()
            fleet.append(_Replica(t, t + self.startup_s))
            self.outstanding.append(0)
            self.sent_to.append(0)
            alive.append(k)
            heapq.heappush(self.starting, (t + self.startup_s, k))
        while len(alive) > target:
            k = alive.pop()  # the newest goes first (a starting pod before a ready one)
            rep = fleet[k]
            rep.accepting = False
            if rep.ready_at > t or self.outstanding[k] == 0:
                rep.ended = t
        self.serving = [k for k in self.serving if fleet[k].accepting]


class _StillFleet(_FixedFleet):
    """A scaled fleet that cannot scale (its ceiling is its warm floor) with round robin: `replay`'s fixed fleet,
    each replica on its own (`_FixedFleet._run_by_replica`), sampled at the same ticks, and the rule's polls judged
    on those samples afterwards (they can change nothing; `rule_wanted` keeps what they asked for)."""

    def __init__(
        self,
        config: EngineConfig,
        load: PlannedLoad,
        rule: ScalingRule,
        warm: int,
        checks: list[Check] | tuple[Check, ...],
        drain_timeout: float,
        tick_s: float,
    ) -> None:
        super().__init__(config, load, warm, "round-robin", checks, drain_timeout)
        self.rule, self.tick_s = rule, tick_s
        t0 = self.origin = self.arrival[0] if self.n_max else 0.0
        self.fleet = [_Replica(t0, t0) for _ in range(warm)]
        self.timeline = Timeline()
        self.peak, self.ups, self.downs, self.rule_wanted = warm, 0, 0, 0
        self.changes: list[tuple[float, int]] = []

    def run(self) -> None:
        self._run_by_replica(tick_s=self.tick_s)
        warm, tl = self.replicas, self.timeline
        hpa = self.rule.autoscaler(warm, warm, warm)
        poll_every = max(1, round(self.rule.poll_s / self.tick_s))
        for j, (running, waiting) in enumerate(zip(*self.ticks, strict=True)):
            t = j * self.tick_s
            tl.t.append(t)
            tl.ready.append(warm)
            tl.running.append(running)
            tl.waiting.append(waiting)
            if j % poll_every == 0:
                hpa.decide(t, running, waiting, warm)
                self.rule_wanted = max(self.rule_wanted, hpa.recommended)
            tl.replicas.append(warm)


def scaled_replay(
    config: EngineConfig,
    load: PlannedLoad,
    rule: ScalingRule,
    startup_s: float,
    warm: int,
    balancer: str = "round-robin",
    checks: list[Check] | tuple[Check, ...] = (),
    drain_timeout: float = 300.0,
    tick_s: float = 5.0,
    max_replicas: int | None = None,
) -> ScaledRun:
    """`load` (open loop) from `warm` ready replicas, scaled by `rule` between `warm` (the floor: an idle fleet above
    the rule's minimum would have been scaled down before the load came) and `max_replicas` (default: the rule's
    maximum), never below `warm`."""
    if balancer not in BALANCERS:
        raise ValueError(f"balancer {balancer!r}: use one of {BALANCERS}")
    if not load.open_loop or load.offsets is None or load.rows is None:
        raise ValueError("scaled_replay takes an open-loop load (arrival offsets)")
    if warm < 1:
        raise ValueError("warm: at least one replica (with none, the chart's rule has no series to wake on)")
    f: _ScaledFleet | _StillFleet
    if max(max_replicas or rule.max_replicas, warm) == warm and balancer == "round-robin":
        f = _StillFleet(config, load, rule, warm, checks, drain_timeout, tick_s)  # the same run, a quarter faster
    else:
        f = _ScaledFleet(config, load, rule, startup_s, warm, balancer, checks, drain_timeout, tick_s, max_replicas)
    return _scaled_run(f, warm, startup_s)


def _scaled_run(f: _ScaledFleet | _StillFleet, warm: int, startup_s: float) -> ScaledRun:
    """Run `f` and sum it up."""
    f.run()
    rule, tick_s = f.rule, f.tick_s
    prediction = f.summary(f.peak, f.sent_to)
    t0, sent, timeline = f.origin, f.sent, f.timeline
    paid = sum(((r.ended if r.ended is not None else f.now) - r.asked) for r in f.fleet)
    arr, failed = f.arr[:sent], f.error[:sent]
    timeline.ttft_p95 = _p95_per_tick(arr - t0, f.first[:sent] - arr, failed, timeline.t, tick_s)
    timeline.e2e_p95 = _p95_per_tick(arr - t0, f.last[:sent] - arr, failed, timeline.t, tick_s)
    drained = next((timeline.t[i] for i in range(len(timeline.t)) if not any(timeline.waiting[i:])), math.inf)
    attainment = {c.name: float(g[:sent][~failed].mean()) if f.counted else 0.0 for c, g in f.good.items()}
    return ScaledRun(
        warm=warm,
        startup_s=startup_s,
        prediction=prediction,
        timeline=timeline,
        replica_seconds=paid,
        peak_replicas=f.peak,
        scale_ups=f.ups,
        scale_downs=f.downs,
        flaps=flaps(f.changes, rule.down_window_s + startup_s),
        queue_drained_s=drained if f.stopped is None else math.inf,
        attainment=attainment,
        rule_wanted=f.rule_wanted,
    )


def flaps(changes: list[tuple[float, int]], window_s: float) -> int:
    """Changes of direction (up after down, down after up) within `window_s` of the change before: a replica
    dropped and wanted back, or added and dropped, before the rule's own window and a cold start have passed. A
    fleet that follows a day's ramps changes direction hours apart and does not count."""
    return sum(1 for (t0, d0), (t1, d1) in itertools.pairwise(changes) if d1 != d0 and t1 - t0 < window_s)


def _p95_per_tick(
    arrived: np.ndarray, latency: np.ndarray, error: np.ndarray, ticks: list[float], tick_s: float
) -> list[float | None]:
    """The p95 of `latency` over the requests that arrived within each tick (errors left out; a request that never
    got its token: inf)."""
    out: list[float | None] = []
    keep = ~error
    arrived, latency = arrived[keep], latency[keep]
    order = np.argsort(arrived, kind="stable")
    arrived, latency = arrived[order], latency[order]
    for t in ticks:
        lo, hi = np.searchsorted(arrived, [t, t + tick_s])
        out.append(type7(np.sort(latency[lo:hi]), 0.95) if hi > lo else None)
    return out
