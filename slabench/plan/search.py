"""The fewest replicas of one GPU profile whose predicted figures meet every latency check.

First the floor: the figures with every request alone on a replica (a sample, one at a time through one replica).
A check the floor already misses cannot be met by any fleet, and the profile is reported as such.

Search: a first guess from the roofline (below) ×1.5, then ×1.5 while a fleet misses (fleets far too small stop
early, so those probes are cheap), then between the largest fleet that misses and the smallest that meets:
the fleet at which the missed check would sit on its target (log-log between the two: a fleet that missed narrowly
ran to the end, so its figures are known), or the midpoint after two probes on the same side, until the two are one
replica apart. It assumes
that adding a replica never breaks a check that fewer replicas met; the answer comes with the simulation one replica
below it, which misses: the evidence that it is the fewest.

First guess: the largest decode batch C one replica can run with its step time within the tightest per-token budget
(the ITL/TPOT ceilings, and the E2E ceiling spread over a long answer), from the memory roofline
``step = overhead + (weights + KV bytes per token × C × mean context) / bandwidth``, capped by the KV cache and
`max_num_seqs`; replicas = the load's output tokens per second ÷ (C / step). Only a starting point: the simulation
decides.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from slabench.core.errors import UserError
from slabench.plan.checks import Check, Judged, binding, judge
from slabench.plan.level import in_flight_per_replica
from slabench.plan.replay import Prediction, replay
from slabench.plan.workload import PlannedLoad
from slabench.sim.profiles import EngineConfig, GpuProfile, ModelProfile, load_profile

# Planning needs no stream chunks: only a request's first and last token are events (see slabench.sim.vllm_fast).
PLAN_ENGINE = {"stream_interval": 10**9}


@dataclass
class Probe:
    replicas: int
    prediction: Prediction
    judged: list[Judged]

    @property
    def meets(self) -> bool:
        return self.prediction.complete and all(j.meets for j in self.judged)

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.prediction.to_dict(),
            "meets": self.meets,
            "checks": [
                {"check": j.check.name, "target": j.check.target, "predicted": j.value, "meets": j.meets}
                for j in self.judged
            ],
        }


@dataclass
class ProfileAnswer:
    gpu: GpuProfile
    model: ModelProfile
    engine: dict[str, Any]  # EngineConfig.summary()
    replicas: int | None = None
    answer: Probe | None = None
    below: Probe | None = None  # one replica fewer (misses), when the answer is > 1
    probes: list[Probe] = field(default_factory=list)
    problem: str | None = None  # why there is no answer
    first_guess: int | None = None
    floor: dict[str, float | None] = field(default_factory=dict)  # figures with each request alone on a replica
    seconds: float = 0.0
    # The 90 % interval: the profile's step time ×1/f (optimistic) and ×f (pessimistic), f = step_time_factor_90.
    factor: float = 1.0
    level: float | None = None  # requests in flight per replica at the model's count (`slabench.plan.level`)
    optimistic: int | None = None  # the fewest replicas if the card is as fast as the interval allows
    pessimistic: int | None = None  # ... as slow: the count the plan picks
    planned: Probe | None = None  # the pessimistic-end fleet at that count (what the plan is judged and priced on)
    at_planned: dict[str, Prediction] = field(default_factory=dict)  # optimistic | model | pessimistic, at that count
    pessimistic_problem: str | None = None  # why no fleet meets the checks at the pessimistic end

    @property
    def binding(self) -> Judged | None:
        return binding(self.answer.judged) if self.answer else None

    @property
    def planned_binding(self) -> Judged | None:
        return binding(self.planned.judged) if self.planned else None

    def replicas_text(self) -> str:
        """ "N (90 %: a–b)": the model's count and the counts at the interval's optimistic and pessimistic ends."""
        if self.replicas is None:
            return "none"
        a = "?" if self.optimistic is None else str(self.optimistic)
        b = "none" if self.pessimistic is None else str(self.pessimistic)
        return f"{self.replicas} (90 %: {a}–{b})"


def first_guess(config: EngineConfig, load: PlannedLoad, checks: list[Check]) -> int:
    mix = load.mix
    rows = np.asarray(load.rows) % len(mix) if load.open_loop else np.arange(len(mix))
    out = mix.output_tokens[rows].astype(float)
    ctx = float(mix.prompt_tokens[rows].mean() + out.mean() / 2)
    budgets = [c.target for c in checks if c.kind in ("itl", "tpot")]
    budgets += [c.target / max(float(np.percentile(out, 95)), 1.0) for c in checks if c.kind == "e2e"]
    bw, w, kv, ov = config.effective_bandwidth, config.weight_bytes, config.kv_bytes_per_token, config.step_overhead_s
    cap = max(1.0, min(config.max_num_seqs, config.kv_capacity_tokens / max(ctx, 1.0)))
    batch = cap
    if budgets:
        batch = min(cap, ((min(budgets) - ov) * bw - w) / (kv * ctx))
    batch = max(batch, 1.0)
    step = ov + (w + kv * batch * ctx) / bw
    per_replica = batch / step  # output tokens per second
    if load.open_loop:
        demand = float(out.sum()) / max(load.span_s, 1.0)
        return max(1, math.ceil(demand / per_replica))
    assert load.users is not None  # a closed loop has its users
    return max(1, math.ceil(load.users / batch))


def fewest_replicas(
    config: EngineConfig,
    load: PlannedLoad,
    checks: list[Check],
    balancer: str,
    drain_timeout: float,
    max_replicas: int,
    guess: int,
    start: int | None = None,
    known_miss: int = 0,
    known_meet: int | None = None,
) -> tuple[int | None, dict[int, Probe]]:
    """The fewest replicas that meet every check (None: not within `max_replicas`), and every probe taken. `start`:
    the first fleet to try (default the guess × 1.5). `known_miss` / `known_meet`: fleets known without a probe to
    miss / to meet (the interval's ends search from the model's answer: slower steps cannot need fewer replicas,
    faster ones cannot need more), so the answer lies above the one and at most the other."""
    probes: dict[int, Probe] = {}

    def meets(r: int) -> bool:
        if r not in probes:
            p = replay(config, load, r, balancer, checks, drain_timeout)
            probes[r] = Probe(r, p, judge(checks, p.figures))
        return probes[r].meets

    lo, hi = known_miss, None  # lo misses (0: nothing below 1), hi meets
    r = min(max(start or math.ceil(guess * 1.5), lo + 1), max_replicas)  # the guess tends low: arrival peaks need more
    while hi is None:  # up ×1.5 until a fleet meets (fleets far too small stop early: cheap)
        if known_meet is not None and r >= known_meet:
            hi = known_meet
        elif meets(r):
            hi = r
        else:
            lo = r
            if r >= max_replicas:
                return None, probes
            r = min(max_replicas, math.ceil(r * 1.5))
    sides: list[bool] = []  # meets?, per probe of this phase
    while hi - lo > 1:
        est = None
        if hi in probes and (len(sides) < 2 or sides[-1] != sides[-2]):  # two on one side in a row: bisect
            est = _interpolate(probes.get(lo), probes[hi]) or _scale(probes, hi)
        if est is not None:
            r = min(hi - 1, max(lo + 1, math.ceil(est)))
        else:
            r = (lo + hi) // 2 if lo else max(1, int(hi * 0.8))
        if meets(r):
            hi = r
        else:
            lo = r
        sides.append(r == hi)
    return hi, probes


def _interpolate(miss: Probe | None, meet: Probe) -> float | None:
    """Replicas at which the check the smaller fleet misses would sit on its target, linear between the two fleets
    (None if the smaller fleet was stopped early or has no such figure)."""
    if miss is None or not miss.prediction.complete:
        return None
    worst = max(
        (j for j in miss.judged if not j.meets and j.value is not None and math.isfinite(j.value)),
        key=lambda j: (j.value or 0.0) / j.check.target if j.check.target > 0 else math.inf,
        default=None,
    )
    if worst is None or worst.value is None:
        return None
    other = next((j for j in meet.judged if j.check.name == worst.check.name), None)
    if other is None or other.value is None or not worst.value > other.value > 0:
        return None
    # log-log: latency falls as a power of the replicas near the answer
    t = math.log(worst.value / worst.check.target) / math.log(worst.value / other.value)
    return math.exp(math.log(miss.replicas) + t * math.log(meet.replicas / miss.replicas))


def _scale(probes: dict[int, Probe], hi: int) -> float | None:
    """Below the smallest fleet that meets, where its tightest latency check would reach the target if latency ∝
    replicas^−β: β from it and the next fleet above that meets (same tightest check), else 1."""

    def tightest(p: Probe) -> tuple[float, str] | None:
        ratios = [
            (j.value / j.check.target, j.check.name)
            for j in p.judged
            if j.check.kind in ("ttft", "itl", "tpot", "e2e") and j.value is not None and j.check.target > 0
        ]
        return max(ratios) if ratios else None

    here = tightest(probes[hi])
    if here is None or not 0 < here[0] < 1:
        return None
    beta = 1.0
    above = min((r for r, p in probes.items() if r > hi and p.meets), default=None)
    if above is not None:
        there = tightest(probes[above])
        if there is not None and there[1] == here[1] and 0 < there[0] < here[0]:
            beta = min(3.0, max(0.3, math.log(here[0] / there[0]) / math.log(above / hi)))
    scaled: float = hi * here[0] ** (1.0 / beta)  # (a float power is typed Any)
    return scaled


def floor_figures(config: EngineConfig, load: PlannedLoad, sample: int = 600) -> dict[str, float | None]:
    """The figures with every request alone on its replica (no batching, a warm prefix cache): no fleet does
    better. A sample of the load's requests, one every 10,000 virtual seconds through one replica."""
    rows = np.asarray(load.rows) if load.open_loop else np.arange(len(load.mix))
    pick = rows[np.linspace(0, len(rows) - 1, min(sample, len(rows))).astype(int)]
    alone = PlannedLoad("alone", "each request alone", load.mix, offsets=np.arange(len(pick)) * 1e4, rows=pick)
    return replay(config, alone, 1, drain_timeout=1e4).figures


def plan_profile(
    gpu_ref: str,
    model_ref: str,
    load: PlannedLoad,
    checks: list[Check],
    balancer: str,
    drain_timeout: float,
    max_replicas: int,
    serving: dict[str, Any] | None = None,
    step_time_factor: float | None = None,
) -> ProfileAnswer:
    """One row of the plan (runs in a worker process: everything here is picklable). `serving`: vLLM flags over the
    profile's own (`slabench.plan.serving`). `step_time_factor`:
    the 90 % step-time interval instead of the profile's stated one (1: the model's count alone)."""
    t0 = time.perf_counter()
    try:
        config = load_profile(gpu_ref, model_ref, engine={**(serving or {}), **PLAN_ENGINE})
    except UserError as e:  # e.g. the model does not fit this card: a row that says so, not a failed plan
        from slabench.sim.profiles import load_gpu_profile, load_model_profile

        gpu, model = load_gpu_profile(gpu_ref), load_model_profile(model_ref)
        return ProfileAnswer(gpu, model, {}, problem=str(e), seconds=time.perf_counter() - t0)
    answer = ProfileAnswer(config.gpu, config.model, config.summary())
    answer.factor = step_time_factor or config.gpu.uncertainty.step_time_factor_90
    answer.floor = floor_figures(config, load)
    hopeless = _hopeless(checks, answer.floor)
    if hopeless:
        answer.problem = hopeless
        answer.seconds = time.perf_counter() - t0
        return answer
    answer.first_guess = first_guess(config, load, checks)
    replicas, probes = fewest_replicas(config, load, checks, balancer, drain_timeout, max_replicas, answer.first_guess)
    answer.probes = [probes[r] for r in sorted(probes)]
    if replicas is None:
        answer.problem = f"no fleet of up to {max_replicas} replicas meets the checks (raise --max-replicas)"
        answer.seconds = time.perf_counter() - t0
        return answer
    answer.replicas = replicas
    answer.answer = probes[replicas]
    answer.level = in_flight_per_replica(answer.answer.prediction)
    if step_time_factor is None:  # a calibrated profile's interval widens beyond the levels it saw
        answer.factor = config.gpu.uncertainty.factor_at(answer.level)
    answer.below = probes.get(replicas - 1)
    _interval(answer, config, load, checks, balancer, drain_timeout, max_replicas, probes)
    answer.seconds = time.perf_counter() - t0
    return answer


def _hopeless(checks: list[Check], floor: dict[str, float | None]) -> str | None:
    latency = ("ttft", "itl", "tpot", "e2e")
    missed = [j for j in judge(checks, floor) if j.check.kind in latency and not j.meets]
    if not missed:
        return None
    return "no fleet can meet " + "; ".join(
        f"{j.check.name} ≤ {j.check.target:g} s ({j.value:.3g} s with every request alone on a replica)" for j in missed
    )


def _interval(
    answer: ProfileAnswer,
    config: EngineConfig,
    load: PlannedLoad,
    checks: list[Check],
    balancer: str,
    drain_timeout: float,
    max_replicas: int,
    probes: dict[int, Probe],
) -> None:
    """The fewest replicas at both ends of the profile's 90 % step-time interval, and every figure at the count the
    plan picks (the pessimistic end's) under the optimistic, the model's and the pessimistic step time."""
    n, f = answer.replicas, answer.factor
    assert n is not None
    if f == 1.0:  # no stated uncertainty: the ends are the model
        answer.optimistic = answer.pessimistic = n
        answer.planned = probes[n]
        answer.at_planned = {e: probes[n].prediction for e in ("optimistic", "model", "pessimistic")}
        return
    ends = {e: replace(config, gpu=config.gpu.slowed(s)) for e, s in (("optimistic", 1 / f), ("pessimistic", f))}
    slow = ends["pessimistic"]
    answer.pessimistic_problem = _hopeless(checks, floor_figures(slow, load))
    guess = answer.first_guess or n

    def start(end: EngineConfig) -> int:
        """The model's count × how the roofline's first guess moves at this end (on the burst, at the pessimistic
        end: 95, 281, 282 where 98, 285, 285 were found), 5 % up so the first fleet tends to meet and the search
        walks down instead of jumping ×1.5."""
        return max(1, math.ceil(n * first_guess(end, load, checks) / guess * 1.05))

    if answer.pessimistic_problem is None:
        b, slow_probes = fewest_replicas(
            slow, load, checks, balancer, drain_timeout, max_replicas, n, start=max(n, start(slow)), known_miss=n - 1
        )
        if b is None:
            answer.pessimistic_problem = f"no fleet of up to {max_replicas} replicas (raise --max-replicas)"
        else:
            answer.pessimistic, answer.planned = b, slow_probes[b]
    fast = ends["optimistic"]
    a, _ = fewest_replicas(
        fast, load, checks, balancer, drain_timeout, max_replicas, n, start=min(n, start(fast)), known_meet=n
    )
    answer.optimistic = a
    if answer.planned is None:
        return
    b = answer.pessimistic
    assert b is not None
    model_at_b = probes[b].prediction if b in probes else replay(config, load, b, balancer, (), drain_timeout)
    answer.at_planned = {
        "optimistic": replay(ends["optimistic"], load, b, balancer, (), drain_timeout),
        "model": model_at_b,
        "pessimistic": answer.planned.prediction,
    }
