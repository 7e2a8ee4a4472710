"""What a day of diurnal load costs on one GPU profile: always on, autoscaled by the chart's rule, or scaled to zero.

A real day (86,400 s) of request-level replay is minutes of CPU per fleet, so the day is a fluid queue in 15 s steps
whose replicas serve what the engine replay measured: each ready replica completes up to `per_replica_rps` (the rate
one replica sustained through the burst while meeting the contract) with up to `slots` requests in flight
(max_num_seqs), so a request holds its slot `slots ÷ per_replica_rps` seconds — its time at full load, at any load
(a simplification: a real request finishes sooner on a lightly loaded replica, so the rule here sees more requests
in flight than it would, and the autoscaled fleet is if anything too large). What is in the system beyond the ready
replicas' slots waits; a request that arrives behind `waiting` requests waits about
`waiting ÷ (ready × per_replica_rps)`, and meets the TTFT target when that wait plus the profile's TTFT with no queue
is within it. A request that arrives with no replica ready is lost (the load balancer has no target: HTTP 503).

- **always on**: the fewest replicas whose rate covers the day's peak, all day;
- **autoscaled**: the chart's rule (`slabench.deploy.hpa.Autoscaler`) with its minimum all day;
- **scale to zero**: the chart's rule as it renders with its schedule: the minimum within business hours; outside,
  KEDA keeps one replica while requests run or wait and scales to zero after `cooldown_s` without any; from zero
  nothing but the schedule brings a replica back (no replica, no series for the trigger to wake on).

Every replica is paid from the moment it is asked for until it is removed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from slabench.deploy.hpa import Autoscaler
from slabench.plan.chart_rule import ScalingRule
from slabench.plan.scaling import flaps

DAY_S = 86400.0
MODES = ("always-on", "autoscaled", "scale-to-zero")


@dataclass
class DayRun:
    mode: str
    replica_hours: float
    usd: float
    requests: float
    lost: float  # arrived with no replica ready
    within_ttft: float  # share of the day's requests served within the TTFT target
    peak_replicas: int
    flaps: int  # changes of direction soon after the last (`slabench.plan.scaling.flaps`): an oscillating rule
    standing_queue_s: float  # time with requests waiting while the rule wanted no more replicas and none was coming
    t: list[float] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    ready: list[int] = field(default_factory=list)
    waiting: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "replica_hours": self.replica_hours,
            "usd": self.usd,
            "requests": self.requests,
            "lost": self.lost,
            "within_ttft": self.within_ttft,
            "peak_replicas": self.peak_replicas,
            "flaps": self.flaps,
            "standing_queue_s": self.standing_queue_s,
        }


def day_run(
    mode: str,
    rate: Callable[[float], float],
    hour_at: Callable[[float], float],
    rule: ScalingRule,
    per_replica_rps: float,
    slots: int,
    startup_s: float,
    usd_per_replica_hour: float,
    ttft_floor_s: float,
    ttft_target_s: float | None,
    peak_rps: float,
    dt: float = 15.0,
    duration_s: float = DAY_S,
    max_replicas: int | None = None,
) -> DayRun:
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: use one of {MODES}")
    if per_replica_rps <= 0 or slots < 1:
        raise ValueError("per_replica_rps must be > 0 and slots ≥ 1")
    service_s = slots / per_replica_rps
    fixed = always_on_replicas(peak_rps, per_replica_rps)
    if mode == "always-on":
        start = fixed
    elif mode == "scale-to-zero" and rule.schedule and not _in_hours(hour_at(0.0), rule.schedule):
        start = 0
    else:
        start = max(1, rule.min_replicas)
    hpa = rule.autoscaler(start, max(1, rule.min_replicas), max(max_replicas or rule.max_replicas, 1))
    ready_at = [0.0] * start  # per alive replica: when it serves
    in_system = 0.0
    last_active = 0.0
    paid = requests = lost = within = standing = 0.0
    peak = start
    changes: list[tuple[float, int]] = []
    run = DayRun(mode, 0.0, 0.0, 0.0, 0.0, 0.0, start, 0, 0.0)
    budget = None if ttft_target_s is None else ttft_target_s - ttft_floor_s
    t = 0.0
    while t < duration_s:
        ready = sum(1 for r in ready_at if r <= t)
        running = min(in_system, ready * slots)
        waiting = in_system - running
        before = len(ready_at)
        if mode == "always-on":
            after = before
        else:
            after = _decide(mode, hpa, rule, t, hour_at(t), running, waiting, ready, last_active)
            if ready and running + waiting > 0:
                last_active = t
        if after != before:
            changes.append((t, 1 if after > before else -1))
            while len(ready_at) < after:
                ready_at.append(t + startup_s)
            del ready_at[after:]  # the newest (a starting one first) goes
            hpa.replicas = after
        peak = max(peak, len(ready_at))
        run.t.append(t)
        run.replicas.append(len(ready_at))
        run.ready.append(ready)
        run.waiting.append(waiting)
        arriving = rate(t) * dt
        requests += arriving
        if ready == 0:
            lost += arriving
        else:
            wait = waiting / (ready * per_replica_rps)
            if budget is None or wait <= budget:
                within += arriving
            in_system += arriving
        content = mode == "always-on" or hpa.wanted <= len(ready_at)
        if waiting > 0.5 and content and all(r <= t for r in ready_at):
            standing += dt  # a queue the rule is content with: no replica wanted or coming for it
        in_system = max(0.0, in_system - running * dt / service_s)
        paid += len(ready_at) * dt
        t += dt
    run.replica_hours = paid / 3600.0
    run.usd = run.replica_hours * usd_per_replica_hour
    run.requests, run.lost = requests, lost
    run.within_ttft = within / requests if requests else 1.0
    run.peak_replicas, run.standing_queue_s = peak, standing
    run.flaps = flaps(changes, rule.down_window_s + startup_s)
    return run


def always_on_replicas(peak_rps: float, per_replica_rps: float) -> int:
    """The fewest replicas whose rate covers the day's peak."""
    return max(1, math.ceil(peak_rps / per_replica_rps - 1e-9))


def _in_hours(hour: float, schedule: tuple[float, float]) -> bool:
    start, end = schedule
    return start <= hour < end if start <= end else hour >= start or hour < end


def _decide(
    mode: str,
    hpa: Autoscaler,
    rule: ScalingRule,
    t: float,
    hour: float,
    running: float,
    waiting: float,
    ready: int,
    last_active: float,
) -> int:
    """The replica count KEDA and the HPA set at this poll."""
    current = hpa.replicas
    if mode == "scale-to-zero" and rule.schedule is not None:
        if _in_hours(hour, rule.schedule):
            floor = max(1, rule.min_replicas)  # the cron trigger's desiredReplicas
        elif current == 0 or (t - last_active >= rule.cooldown_s and running + waiting == 0):
            hpa.wanted = 0
            return 0  # inactive for the cooldown, or already at zero with no series to wake on
        else:
            floor = 1  # active: KEDA's HPA keeps at least one
        if current == 0:
            hpa.wanted = floor
            return floor
        hpa.min_replicas = floor
    return hpa.decide(t, running, waiting, ready)
