"""Replay a load on a fleet the chart's autoscaling rule scales, in virtual time: `replay`'s engines and figures,
with replicas that come and go.

The fleet starts with `warm` replicas ready. Every `tick_s` the replay samples the fleet (replicas asked for, ready,
requests running and waiting over the ready replicas: the series KEDA's query sums); at every poll of the rule the
HPA's arithmetic (`slabench.deploy.hpa.Autoscaler`) decides the replica count. A replica added at t serves from
t + `startup_s` (the cold start of `slabench.plan.coldstart`); until then it takes no request and reports no series.
A replica removed while starting is cancelled; a ready one stops taking requests, finishes what it holds and goes.
Each replica is paid from the moment it is asked for (its node is launched for it) until it is gone.

The load balancer spreads arrivals over the ready replicas still taking requests, as `replay` does (round robin, or
least outstanding requests). Per-request figures, the early stop on checks that have failed for sure, and the
summary are `replay`'s own.
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
from slabench.plan.replay import BALANCERS, Prediction, TokenGaps, _Deadlines, _summarize, type7
from slabench.plan.workload import PlannedLoad
from slabench.sim.profiles import EngineConfig
from slabench.sim.vllm_fast import PlanningEngine


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


class _Replica:
    __slots__ = ("accepting", "asked", "ended", "engine", "ready_at")

    def __init__(self, engine: PlanningEngine, asked: float, ready_at: float) -> None:
        self.engine = engine
        self.asked = asked
        self.ready_at = ready_at
        self.accepting = True
        self.ended: float | None = None


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
    gaps = TokenGaps()
    firsts: list[tuple[str, float]] = []
    mix = load.mix
    max_len = config.max_model_len
    arrival = [float(t) for t in load.offsets]
    rows = np.asarray(load.rows)
    n = len(arrival)
    t0 = arrival[0] if n else 0.0
    prompt = mix.prompt_tokens[rows % len(mix)]
    arr = np.asarray(arrival, dtype=float)
    first = np.full(n, math.inf)
    last = np.full(n, math.inf)
    gen = np.zeros(n, dtype=np.int64)
    ptok = np.zeros(n, dtype=np.int64)
    error = (prompt < 1) | (prompt + mix.max_tokens > max_len)
    counted = int(n - error.sum())
    deadline_checks = [c for c in checks if c.per_request_deadline]
    good = {c: error.copy() for c in deadline_checks}
    deadlines = [_Deadlines(c, arrival, good[c], counted) for c in deadline_checks]
    ttft_good = [(c, good[c]) for c in deadline_checks if c.kind == "ttft"]
    e2e_good = [(c, good[c]) for c in deadline_checks if c.kind == "e2e"]

    # the warm fleet is the floor (minReplicas, or a cron trigger's desiredReplicas, set to it)
    hpa = rule.autoscaler(warm, warm, max(max_replicas or rule.max_replicas, warm))
    fleet: list[_Replica] = []

    def new_replica(asked: float, ready_at: float) -> None:
        fleet.append(_Replica(PlanningEngine(config, token_gaps=gaps, first_tokens=firsts), asked, ready_at))

    for _ in range(warm):
        new_replica(t0, t0)
    alive = list(range(warm))  # replicas asked for and not removed, oldest first
    starting: list[tuple[float, int]] = []  # (ready at, replica)
    serving: list[int] = list(range(warm))  # ready and taking requests
    outstanding: list[int] = [0] * warm
    rr = 0
    events: list[tuple[float, int, int]] = []
    version: list[int] = [0] * warm

    def push(k: int) -> None:
        t = fleet[k].engine.next_event_time()
        version[k] += 1
        if t is not None:
            heapq.heappush(events, (t, k, version[k]))

    timeline = Timeline()
    poll_every = max(1, round(rule.poll_s / tick_s))
    tick = 0
    next_tick = t0
    horizon = (arrival[-1] if n else t0) + drain_timeout
    next_open = 0
    stopped: str | None = None
    now = t0
    ups = downs = 0
    changes: list[tuple[float, int]] = []
    peak = warm

    def scale_to(target: int, t: float) -> None:
        nonlocal serving
        while len(alive) < target:
            new_replica(t, t + startup_s)
            version.append(0)
            outstanding.append(0)
            k = len(fleet) - 1
            alive.append(k)
            heapq.heappush(starting, (t + startup_s, k))
        while len(alive) > target:
            k = alive.pop()  # the newest goes first (a starting pod before a ready one)
            rep = fleet[k]
            rep.accepting = False
            if rep.ready_at > t or outstanding[k] == 0:
                rep.ended = t
        serving = [k for k in serving if fleet[k].accepting]

    while True:
        while events and events[0][2] != version[events[0][1]]:
            heapq.heappop(events)
        te = events[0][0] if events else math.inf
        ta = arrival[next_open] if next_open < n else math.inf
        ts = starting[0][0] if starting else math.inf
        busy = next_open < n or te < math.inf or starting
        tt = next_tick if busy else math.inf
        t = min(te, ta, ts, tt)
        if t == math.inf or t > horizon:
            break
        now = t
        if tt == t:  # sample the fleet; at a poll, the HPA decides
            ready_reps = [k for k, r in enumerate(fleet) if r.ended is None and r.ready_at <= t]
            running = waiting = 0.0
            for k in ready_reps:
                st = fleet[k].engine.stats()
                running += st["num_requests_running"]
                waiting += st["num_requests_waiting"]
            timeline.t.append(t - t0)
            timeline.ready.append(len(ready_reps))
            timeline.running.append(running)
            timeline.waiting.append(waiting)
            if tick % poll_every == 0:
                before = len(alive)
                after = hpa.decide(t - t0, running, waiting, len(ready_reps))
                if after != before:
                    direction = 1 if after > before else -1
                    ups += direction > 0
                    downs += direction < 0
                    changes.append((t, direction))
                    scale_to(after, t)
                    peak = max(peak, after)
            timeline.replicas.append(len(alive))
            tick += 1
            next_tick = t0 + tick * tick_s
            continue
        if ts == t:
            _, k = heapq.heappop(starting)
            if fleet[k].accepting:
                serving.append(k)
            continue
        if ta == t and ta <= te:
            i = next_open
            next_open += 1
            if error[i]:
                continue
            if not serving:  # nothing ready (cannot happen from warm ≥ 1 with min ≥ 1): the ALB's 503
                error[i] = True
                continue
            if balancer == "round-robin":
                k = serving[rr % len(serving)]
                rr += 1
            else:
                k = min(serving, key=lambda j: outstanding[j])
            req = mix.request(str(i), int(rows[i]))
            ptok[i] = req.prompt_tokens
            outstanding[k] += 1
            fleet[k].engine.add(req, ta)
            push(k)
            continue
        _, k, _ = heapq.heappop(events)
        eng = fleet[k].engine
        eng.step(te)
        for rid, ft in firsts:
            i = int(rid)
            first[i] = ft
            for c, g in ttft_good:
                if ft - arr[i] <= c.target:
                    g[i] = True
        firsts.clear()
        for d in eng.pop_finished():
            i = int(d.request_id)
            last[i] = d.last_token
            gen[i] = d.generation_tokens
            outstanding[k] -= 1
            for c, g in e2e_good:
                if d.last_token - arr[i] <= c.target:
                    g[i] = True
        if not fleet[k].accepting and outstanding[k] == 0 and fleet[k].ended is None:
            fleet[k].ended = te
        push(k)
        for dl in deadlines:
            if dl.failed(te):
                stopped = (
                    f"{dl.check.name}: {dl.bad:,} requests already past {dl.check.target:g} s without their "
                    f"{'first' if dl.check.kind == 'ttft' else 'last'} token by t = {te - t0:.0f} s"
                )
                break
        if stopped:
            break

    sent = n if stopped is None else next_open
    prediction = _summarize(
        peak,
        balancer,
        stopped,
        arr[:sent],
        first[:sent],
        last[:sent],
        gen[:sent],
        ptok[:sent],
        error[:sent],
        gaps,
        float(now) if stopped else None,
        sum(r.engine.num_preemptions_total for r in fleet),
        [0] * peak,
    )
    end = now
    paid = sum(((r.ended if r.ended is not None else end) - r.asked) for r in fleet)
    arrived, failed = arr[:sent] - t0, error[:sent]
    timeline.ttft_p95 = _p95_per_tick(arrived, (first - arr)[:sent], failed, timeline.t, tick_s)
    timeline.e2e_p95 = _p95_per_tick(arrived, (last - arr)[:sent], failed, timeline.t, tick_s)
    drained = next((timeline.t[i] for i in range(len(timeline.t)) if not any(timeline.waiting[i:])), math.inf)
    attainment = {c.name: float(good[c][:sent][~error[:sent]].mean()) if counted else 0.0 for c in deadline_checks}
    return ScaledRun(
        warm=warm,
        startup_s=startup_s,
        prediction=prediction,
        timeline=timeline,
        replica_seconds=paid,
        peak_replicas=peak,
        scale_ups=ups,
        scale_downs=downs,
        flaps=flaps(changes, rule.down_window_s + startup_s),
        queue_drained_s=drained if stopped is None else math.inf,
        attainment=attainment,
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
