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
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from slabench.core.errors import UserError
from slabench.plan.checks import Check, Judged, binding, judge
from slabench.plan.level import in_flight_per_replica
from slabench.plan.replay import Prediction, replay
from slabench.plan.scaling import ScaledRun, Scaling, scaled_replay
from slabench.plan.workload import PlannedLoad
from slabench.sim.profiles import EngineConfig, GpuProfile, ModelProfile, load_profile

# Planning needs no stream chunks: only a request's first and last token are events (see slabench.sim.vllm_fast).
PLAN_ENGINE = {"stream_interval": 10**9}


@dataclass
class Probe:
    replicas: int
    prediction: Prediction
    judged: list[Judged]
    scaled: ScaledRun | None = None  # the same fleet as an autoscaled one that cannot scale (`ProfileJob.probe`)

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
    pessimistic_runs: dict[int, ScaledRun] = field(default_factory=dict)  # its search's fleets, scaled (--autoscale)

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
    job: ProfileJob,
    config: EngineConfig,
    guess: int,
    start: int | None = None,
    known_miss: int = 0,
    known_meet: int | None = None,
    scaled: bool = False,
) -> tuple[int | None, dict[int, Probe]]:
    """The fewest replicas of `config` that meet the job's checks (None: not within its `max_replicas`), and every
    probe taken. `start`:
    the first fleet to try (default the guess × 1.5). `known_miss` / `known_meet`: fleets known without a probe to
    miss / to meet (the interval's ends search from the model's answer: slower steps cannot need fewer replicas,
    faster ones cannot need more), so the answer lies above the one and at most the other. `scaled`: each probe as
    `ProfileJob.probe` runs it so."""
    probes: dict[int, Probe] = {}
    max_replicas = job.max_replicas

    def meets(r: int) -> bool:
        if r not in probes:
            probes[r] = job.probe(config, r, scaled)
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


@dataclass(frozen=True)
class ProfileJob:
    """One profile's plan: what each of its parts needs (picklable: the parts run in worker processes)."""

    gpu_ref: str
    model_ref: str
    load: PlannedLoad
    checks: list[Check]
    balancer: str
    drain_timeout: float
    max_replicas: int
    serving: dict[str, Any] | None = None
    step_time_factor: float | None = None  # the 90 % step-time interval instead of the profile's stated one
    # --autoscale: its rule and cold start. The pessimistic end's search then replays each fleet as an autoscaled
    # one from its replicas with them as the ceiling: the same figures (round robin rotates alike on both), and
    # `autoscale_profile` takes those the rule never asked to scale instead of replaying them again.
    scaling: Scaling | None = None

    def config(self) -> EngineConfig:
        return load_profile(self.gpu_ref, self.model_ref, engine={**(self.serving or {}), **PLAN_ENGINE})

    def ends(self, factor: float) -> dict[str, EngineConfig]:
        """The optimistic and pessimistic ends of the step-time interval ×1/factor … ×factor."""
        config = self.config()
        return {
            e: replace(config, gpu=config.gpu.slowed(s))
            for e, s in (("optimistic", 1 / factor), ("pessimistic", factor))
        }

    def probe(self, config: EngineConfig, replicas: int, scaled: bool = False) -> Probe:
        """One fleet of a search, judged (it stops early on a check that has failed for sure); `scaled` (with
        `scaling`): run as an autoscaled fleet that cannot grow, kept as `Probe.scaled`."""
        if scaled and self.scaling is not None:
            run = scaled_replay(
                config, self.load, self.scaling.rule, self.scaling.startup_s(config), replicas, self.balancer,
                self.checks, self.drain_timeout, max_replicas=replicas,
            )  # fmt: skip
            return Probe(replicas, run.prediction, judge(self.checks, run.prediction.figures), run)
        p = replay(config, self.load, replicas, self.balancer, self.checks, self.drain_timeout)
        return Probe(replicas, p, judge(self.checks, p.figures))

    def replay(self, config: EngineConfig, replicas: int) -> Prediction:
        """The figures of this fleet to the end (no early stop)."""
        return replay(config, self.load, replicas, self.balancer, (), self.drain_timeout)


@dataclass
class EndAnswer:
    """The fewest replicas at one end of the interval (None: none within --max-replicas, or `problem`)."""

    replicas: int | None
    probe: Probe | None = None
    problem: str | None = None
    seconds: float = 0.0
    scaled: dict[int, ScaledRun] = field(default_factory=dict)  # the search's fleets as scaled runs (`Probe.scaled`)


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
    """One row of the plan, its parts one after another (`plan_profiles` runs them in parallel). `serving`: vLLM
    flags over the profile's own (`slabench.plan.serving`). `step_time_factor`: the 90 % step-time interval instead
    of the profile's stated one (1: the model's count alone)."""
    job = ProfileJob(gpu_ref, model_ref, load, checks, balancer, drain_timeout, max_replicas, serving, step_time_factor)
    answer = plan_model(job)
    if needs_interval(answer):
        ends = {e: search_end(job, answer, e) for e in ("pessimistic", "optimistic")}
        b = ends["pessimistic"].replicas
        at = {w: replay_at(job, answer, w, b) for w in at_planned_replays(answer, b)} if b is not None else {}
        finish_interval(answer, ends, at)
    return answer


def plan_profiles(
    pool: Executor, jobs: list[ProfileJob], planned: Callable[[int, ProfileAnswer], None] | None = None
) -> list[ProfileAnswer]:
    """Every job's answer, its parts spread over the pool's workers as soon as each can start: the model's search,
    then the interval's two ends side by side, then the replays at the planned count. `planned(i, answer)` is
    called as soon as job i's answer is complete (to start more work on it in the same pool)."""
    answers: dict[int, ProfileAnswer] = {}
    ends: dict[int, dict[str, EndAnswer]] = {i: {} for i in range(len(jobs))}
    at: dict[int, dict[str, Prediction]] = {i: {} for i in range(len(jobs))}
    running: dict[Future[Any], tuple[int, str]] = {}
    for i, job in enumerate(jobs):
        running[pool.submit(plan_model, job)] = (i, "model")
    while running:
        done, _ = wait(running, return_when=FIRST_COMPLETED)
        for f in done:
            i, part = running.pop(f)
            job, result = jobs[i], f.result()
            if part == "model":
                answers[i] = result
                if needs_interval(result):
                    for end in ("pessimistic", "optimistic"):
                        running[pool.submit(search_end, job, result, end)] = (i, end)
                elif planned is not None:
                    planned(i, result)
            elif part in ("pessimistic", "optimistic"):
                ends[i][part] = result
                if part == "pessimistic":
                    for w in at_planned_replays(answers[i], result.replicas):
                        running[pool.submit(replay_at, job, answers[i], w, result.replicas)] = (i, f"at {w}")
            else:
                at[i][part.removeprefix("at ")] = result
            a = answers[i]
            if (
                part != "model"
                and len(ends[i]) == 2
                and len(at[i]) == len(at_planned_replays(a, ends[i]["pessimistic"].replicas))
            ):
                finish_interval(a, ends[i], at[i])
                if planned is not None:
                    planned(i, a)
    return [answers[i] for i in range(len(jobs))]


def plan_model(job: ProfileJob) -> ProfileAnswer:
    """The profile's floor and the fewest replicas at the model's step time; with no interval to search (a factor
    of 1), the whole answer."""
    t0 = time.perf_counter()
    try:
        config = job.config()
    except UserError as e:  # e.g. the model does not fit this card: a row that says so, not a failed plan
        from slabench.sim.profiles import load_gpu_profile, load_model_profile

        gpu, model = load_gpu_profile(job.gpu_ref), load_model_profile(job.model_ref)
        return ProfileAnswer(gpu, model, {}, problem=str(e), seconds=time.perf_counter() - t0)
    answer = ProfileAnswer(config.gpu, config.model, config.summary())
    answer.factor = job.step_time_factor or config.gpu.uncertainty.step_time_factor_90
    answer.floor = floor_figures(config, job.load)
    hopeless = _hopeless(job.checks, answer.floor)
    if hopeless:
        answer.problem = hopeless
        answer.seconds = time.perf_counter() - t0
        return answer
    answer.first_guess = first_guess(config, job.load, job.checks)
    replicas, probes = fewest_replicas(job, config, answer.first_guess)
    answer.probes = [probes[r] for r in sorted(probes)]
    if replicas is None:
        answer.problem = f"no fleet of up to {job.max_replicas} replicas meets the checks (raise --max-replicas)"
    else:
        answer.replicas = replicas
        answer.answer = probes[replicas]
        answer.level = in_flight_per_replica(answer.answer.prediction)
        if job.step_time_factor is None:  # a calibrated profile's interval widens beyond the levels it saw
            answer.factor = config.gpu.uncertainty.factor_at(answer.level)
        answer.below = probes.get(replicas - 1)
        if answer.factor == 1.0:  # no stated uncertainty: the ends are the model
            n = replicas
            answer.optimistic = answer.pessimistic = n
            answer.planned = probes[n]
            answer.at_planned = {e: probes[n].prediction for e in ("optimistic", "model", "pessimistic")}
    answer.seconds = time.perf_counter() - t0
    return answer


def needs_interval(answer: ProfileAnswer) -> bool:
    return answer.replicas is not None and answer.factor != 1.0


def _hopeless(checks: list[Check], floor: dict[str, float | None]) -> str | None:
    latency = ("ttft", "itl", "tpot", "e2e")
    missed = [j for j in judge(checks, floor) if j.check.kind in latency and not j.meets]
    if not missed:
        return None
    return "no fleet can meet " + "; ".join(
        f"{j.check.name} ≤ {j.check.target:g} s ({j.value:.3g} s with every request alone on a replica)" for j in missed
    )


def search_end(job: ProfileJob, answer: ProfileAnswer, end: str) -> EndAnswer:
    """The fewest replicas at one end of the profile's 90 % step-time interval, searched from the model's answer
    N: slower steps cannot need fewer replicas (the pessimistic end lies above N − 1), faster ones cannot need
    more (the optimistic end at most N)."""
    t0 = time.perf_counter()
    n, guess = answer.replicas, answer.first_guess or answer.replicas
    assert n is not None and guess is not None
    config = job.ends(answer.factor)[end]
    # The model's count × how the roofline's first guess moves at this end (on the burst, at the pessimistic end:
    # 95, 281, 282 where 98, 285, 285 were found), 5 % up so the first fleet tends to meet and the search walks
    # down instead of jumping ×1.5.
    start = max(1, math.ceil(n * first_guess(config, job.load, job.checks) / guess * 1.05))
    out = EndAnswer(None)
    if end == "pessimistic":
        out.problem = _hopeless(job.checks, floor_figures(config, job.load))
        if out.problem is None:
            # what --autoscale replays is this end: its fleets as scaled runs
            b, probes = fewest_replicas(job, config, n, start=max(n, start), known_miss=n - 1, scaled=True)
            out.scaled = {r: p.scaled for r, p in probes.items() if p.scaled is not None}
            if b is None:
                out.problem = f"no fleet of up to {job.max_replicas} replicas (raise --max-replicas)"
            else:
                out.replicas, out.probe = b, probes[b]
    else:
        out.replicas, _ = fewest_replicas(job, config, n, start=min(n, start), known_meet=n)
    out.seconds = time.perf_counter() - t0
    return out


def at_planned_replays(answer: ProfileAnswer, b: int | None) -> tuple[str, ...]:
    """The replays the planned count b still needs: the optimistic end's, and the model's unless its search has it."""
    if b is None:
        return ()
    return ("optimistic",) if any(p.replicas == b for p in answer.probes) else ("optimistic", "model")


def replay_at(job: ProfileJob, answer: ProfileAnswer, which: str, b: int) -> Prediction:
    config = job.config() if which == "model" else job.ends(answer.factor)[which]
    return job.replay(config, b)


def finish_interval(answer: ProfileAnswer, ends: dict[str, EndAnswer], at: dict[str, Prediction]) -> None:
    """The interval's counts, and every figure at the count the plan picks (the pessimistic end's) under the
    optimistic, the model's and the pessimistic step time."""
    slow, fast = ends["pessimistic"], ends["optimistic"]
    answer.pessimistic_problem = slow.problem
    answer.pessimistic_runs = slow.scaled
    answer.optimistic = fast.replicas
    answer.seconds += slow.seconds + fast.seconds
    if slow.probe is None:
        return
    b = answer.pessimistic = slow.replicas
    answer.planned = slow.probe
    model = next((p.prediction for p in answer.probes if p.replicas == b), None) or at["model"]
    answer.at_planned = {"optimistic": at["optimistic"], "model": model, "pessimistic": slow.probe.prediction}
