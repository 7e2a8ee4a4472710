"""`slabench plan --autoscale`: per GPU profile, the fleet in time — warm replicas the burst needs, what scaling from
fewer gives, and what a day costs always on, autoscaled or scaled to zero.

For each profile the plan answered (its fewest replicas R, all up before the load), the load is replayed on a fleet
the chart's own rule scales (`slabench.plan.scaling`), new replicas serving after the cold start of the chosen cache
tier (`slabench.plan.coldstart`). Warm replicas: the fewest N ≤ R from which the scaled fleet still meets every
check — first N = R − 1 (autoscaling rarely saves more: replicas it adds come minutes late), then down by doubling
steps while it meets, then bisection; the replay from N − 1 (which misses) comes with it as the evidence. A replay
the plan's search already ran (its pessimistic end's fleets, replayed as scaled ones with their own size as the
ceiling) is taken from it when the rule never asked for more replicas there: a higher ceiling changes nothing. A day:
`slabench.plan.day`, each replica serving at the rate one replica sustained in the plan's answer.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from slabench.plan.chart_rule import ScalingRule
from slabench.plan.checks import Check, judge
from slabench.plan.coldstart import ColdStart
from slabench.plan.day import DAY_S, MODES, DayRun, always_on_replicas, day_run
from slabench.plan.scaling import ScaledRun, scaled_replay
from slabench.plan.search import ProfileJob


@dataclass
class AutoscaleAnswer:
    gpu: str
    tier: str
    cold_start: str  # the cold start's steps and seconds
    warm: int | None = None
    run: ScaledRun | None = None  # from `warm` replicas
    below: ScaledRun | None = None  # from warm − 1 (misses), when warm > 1
    requested: ScaledRun | None = None  # from --warm PROFILE=N
    requested_meets: bool | None = None
    probes: dict[int, bool] = field(default_factory=dict)  # warm replicas tried: met?
    per_replica_rps: float | None = None
    day_max_replicas: int | None = None  # the ceiling the day ran with (the chart's, or raised to the peak's need)
    day: dict[str, DayRun] = field(default_factory=dict)
    problem: str | None = None
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "cache_tier": self.tier,
            "cold_start": self.cold_start,
            "warm_replicas": self.warm,
            "from_warm": self.run.to_dict() if self.run else None,
            "from_one_fewer": self.below.to_dict() if self.below else None,
            "from_requested": self.requested.to_dict() if self.requested else None,
            "from_requested_meets": self.requested_meets,
            "probes": {str(k): v for k, v in sorted(self.probes.items())},
            "per_replica_rps": self.per_replica_rps,
            "day_max_replicas": self.day_max_replicas,
            "day": {m: d.to_dict() for m, d in self.day.items()},
            "problem": self.problem,
            "seconds": round(self.seconds, 2),
        }


def meets(run: ScaledRun, checks: list[Check]) -> bool:
    return run.prediction.complete and all(j.meets for j in judge(checks, run.prediction.figures))


def fewest_warm(probe: Callable[[int], bool], static: int) -> tuple[int, dict[int, bool]]:
    """The fewest warm replicas N ≤ `static` with `probe(N)` true, given probe(static) is (autoscaling only adds to
    the fleet that met without it). Probes N = static − 1 first, then down in doubling steps, then bisects."""
    seen: dict[int, bool] = {static: True}
    lo, hi, step = 0, static, 1
    while hi - step > lo:
        n = hi - step
        seen[n] = probe(n)
        if not seen[n]:
            lo = n
            break
        hi, step = n, step * 2
    while hi - lo > 1:
        n = (lo + hi) // 2
        seen[n] = probe(n)
        lo, hi = (lo, n) if seen[n] else (n, hi)
    return hi, seen


def autoscale_profile(
    job: ProfileJob,
    rule: ScalingRule,
    cold: ColdStart,
    tier: str,
    static: int,
    static_ok: int,
    static_drain_s: float,
    usd_per_replica_hour: float,
    ttft_floor_s: float,
    day_peak_rps: float,
    requested: int | None = None,
    step_time_factor: float = 1.0,
    searched: dict[int, ScaledRun] | None = None,
) -> AutoscaleAnswer:
    """One profile's answer (runs in a worker process: everything here is picklable), with every step
    `step_time_factor` times as long as the profile's (the plan's pessimistic end). `searched`: scaled runs from
    N warm replicas at that end with the same rule and cold start (`ProfileAnswer.pessimistic_runs`), taken
    instead of a replay where the ceiling never came into play."""
    from slabench.shapes.schedules import OFFICE_DAY, Diurnal

    t0 = time.perf_counter()
    load, checks = job.load, job.checks
    config = job.config()
    config = replace(config, gpu=config.gpu.slowed(step_time_factor))
    startup = cold.seconds(tier, config.weight_bytes)
    answer = AutoscaleAnswer(config.gpu.name, tier, cold.describe(tier, config.weight_bytes))
    runs: dict[int, ScaledRun] = {}
    ceiling = max(rule.max_replicas, static)

    def probe(n: int) -> bool:
        known = (searched or {}).get(n)
        if known is not None and known.same_with_ceiling(ceiling):
            runs[n] = known
        else:
            runs[n] = scaled_replay(
                config, load, rule, startup, n, job.balancer, checks, job.drain_timeout, max_replicas=ceiling
            )
        return meets(runs[n], checks)

    if load.open_loop:
        warm, answer.probes = fewest_warm(probe, static)
        if warm not in runs and not probe(warm):
            answer.problem = f"from {warm} warm replicas (the plan's answer) the scaled fleet misses a check"
        answer.warm, answer.run, answer.below = warm, runs[warm], runs.get(warm - 1)
        if requested is not None:
            if requested not in runs:
                probe(requested)
            answer.requested = runs[requested]
            answer.requested_meets = meets(runs[requested], checks)
    else:
        answer.problem = "a closed loop has no arrival times to scale on: the burst, rate, diurnal and queue loads do"
    if static_drain_s > 0 and static_ok > 0:
        rps = static_ok / (static * static_drain_s)
        answer.per_replica_rps = rps
        day = Diurnal(OFFICE_DAY, day_peak_rps, DAY_S, 1)
        ttft = next((c.target for c in checks if c.kind == "ttft"), None)
        answer.day_max_replicas = max(rule.max_replicas, always_on_replicas(day_peak_rps, rps))
        for mode in MODES:
            answer.day[mode] = day_run(
                mode,
                day.rate_at,
                day.hour_at,
                rule,
                rps,
                config.max_num_seqs,
                startup,
                usd_per_replica_hour,
                ttft_floor_s,
                ttft,
                day_peak_rps,
                max_replicas=answer.day_max_replicas,
            )
    answer.seconds = time.perf_counter() - t0
    return answer


# -- the console view --------------------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{x:.2%}"


def _secs(x: float) -> str:
    return "never" if math.isinf(x) else f"{x:,.0f} s"


def _attained(run: ScaledRun) -> str:
    return _pct(min(run.attainment.values())) if run.attainment else "—"


class AutoscaleView:
    """One row per profile (80 columns): warm replicas, the SLA attained and the queue gone from them and from one
    fewer, and the day's cost three ways; then a note per finding (a standing queue, an oscillation, lost
    requests) and the assumptions."""

    def __init__(self, answers: list[AutoscaleAnswer], rule: ScalingRule, peak_rps: float) -> None:
        self.answers, self.rule, self.peak_rps = answers, rule, peak_rps

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        t = Table(
            title="autoscaling — the load from warm replicas; a day's cost",
            box=box.SIMPLE_HEAD,
            title_justify="left",
            show_edge=False,
            padding=(0, 1, 0, 0),
        )
        heads = (
            "GPU profile",
            "warm",
            "SLA met\nqueue gone",
            "warm − 1:\nSLA, queue",
            "$/day on\nautoscaled",
            "$/day\nto zero",
        )
        for h in heads:
            t.add_column(h, justify="left" if h == heads[0] else "right", no_wrap=True)
        notes: list[str] = []
        for a in self.answers:
            if a.run is None:
                t.add_row(a.gpu, "—", "—", "—", *self._day(a))
                notes.append(f"{a.gpu}: {a.problem}")
                continue
            below = f"{_attained(a.below)}\n{_secs(a.below.queue_drained_s)}" if a.below else "—\n—"
            t.add_row(a.gpu, str(a.warm), f"{_attained(a.run)}\n{_secs(a.run.queue_drained_s)}", below, *self._day(a))
            notes += self._notes(a)
        yield t
        yield Text(
            "SLA met: the lowest share of requests within a TTFT/E2E percentile target; queue gone: from the first "
            "arrival until no request waits (never: the replay stopped early, a check had failed for sure)"
        )
        for n in notes:
            yield Text(f"note: {n}", style="yellow")
        yield Text(f"assumption: rule: {self.rule.describe()}")
        for a in self.answers[:1]:
            yield Text(f"assumption: cold start ({a.gpu}; docs/plan.md): {a.cold_start}")
        yield Text(
            f"assumption: day: the office day at peak {self.peak_rps:g} req/s over 24 h, a fluid queue at the rate "
            "one replica sustained in the plan's answer (docs/plan.md)"
        )

    def _day(self, a: AutoscaleAnswer) -> tuple[str, str]:
        if not a.day:
            return "—", "—"
        on, auto, zero = (a.day[m] for m in MODES)
        return f"${on.usd:,.0f}\n${auto.usd:,.0f}", f"${zero.usd:,.0f}"

    def _notes(self, a: AutoscaleAnswer) -> list[str]:
        out = []
        r = a.run
        q = a.requested
        if q is not None:
            verdict = "meets the contract" if a.requested_meets else "misses the contract"
            out.append(
                f"{a.gpu}: from {q.warm} warm (--warm): {_attained(q)} within the targets, queue gone "
                f"{_secs(q.queue_drained_s)}, the rule asked for up to {q.peak_replicas} — {verdict}"
            )
        for run in (r, a.below):
            if run is not None and run.flaps:
                out.append(f"{a.gpu}: from {run.warm} warm the replica count flaps {run.flaps} times (oscillates)")
        below = a.below
        if below is not None and not below.scale_ups:
            seen = below.peak_load_per_replica
            why = (
                " — it waits for the batch to fill, and the contract is missed first"
                if seen <= self.rule.target
                else ""
            )
            out.append(
                f"{a.gpu}: from {below.warm} warm the rule never asked for a replica (at most {seen:.0f} requests "
                f"per replica, against its target {self.rule.target:g} and the HPA's 10 % tolerance){why}"
            )
        elif below is not None and below.scale_ups:
            out.append(
                f"{a.gpu}: from {below.warm} warm the rule asked for {below.peak_replicas}, each serving "
                f"{below.startup_s:.0f} s after it was asked for: too late for the contract"
            )
        if r is not None and r.scale_ups:
            out.append(
                f"{a.gpu}: from {a.warm} warm the rule asked for {r.peak_replicas} replicas; each serves "
                f"{r.startup_s:.0f} s after it is asked for"
            )
        if a.day_max_replicas is not None and a.day_max_replicas > self.rule.max_replicas:
            out.append(
                f"{a.gpu}: the day's peak needs {a.day_max_replicas} replicas, above the chart's maxReplicas "
                f"{self.rule.max_replicas}: the day ran with {a.day_max_replicas} (deploy with autoscaling.maxReplicas "
                f"≥ {a.day_max_replicas} and a NodePool GPU limit to match)"
            )
        for d in a.day.values():
            problems = []
            if d.lost:
                problems.append(f"{d.lost:,.0f} requests arrive with no replica ready")
            if d.standing_queue_s:
                problems.append(f"a standing queue for {d.standing_queue_s / 60:,.0f} min (no replica coming)")
            if d.flaps:
                problems.append(f"the replica count flaps {d.flaps} times (oscillates)")
            if problems:
                out.append(
                    f"{a.gpu}, day {d.mode}: " + "; ".join(problems) + f"; {_pct(d.within_ttft)} within the TTFT target"
                )
        return out


# -- the plot ----------------------------------------------------------------------------------------------------


def plot_png(answers: list[AutoscaleAnswer], checks: list[Check]) -> bytes:
    """Replicas the rule added to the warm ones (asked for; ready: dotted), requests waiting, and the TTFT and E2E
    p95 of each 5 s of arrivals over the load, from each profile's warm replicas (solid) and from one fewer
    (dashed), and from --warm's N (dash-dot); the contract's targets dashed grey."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, ScalarFormatter

    fig = Figure(figsize=(7.6, 8.6), dpi=110, layout="constrained")
    ax_r, ax_q, ax_t, ax_e = fig.subplots(4, 1, sharex=True)
    for a in answers:
        if a.run is None:
            continue
        color = None
        for run, style in ((a.run, "-"), (a.below, "--"), (a.requested, "-.")):
            if run is None:
                continue
            tl = run.timeline
            added = [n - run.warm for n in tl.replicas]
            (line,) = ax_r.plot(tl.t, added, style, lw=1.4, color=color, label=f"{a.gpu} from {run.warm}")
            color = line.get_color()
            ax_r.plot(tl.t, [n - run.warm for n in tl.ready], ":", lw=1, color=color)
            ax_q.plot(tl.t, tl.waiting, style, lw=1.2, color=color)
            for ax, values in ((ax_t, tl.ttft_p95), (ax_e, tl.e2e_p95)):
                ys = [math.nan if v is None or math.isinf(v) else v for v in values]
                ax.plot(tl.t, ys, style, lw=1.2, color=color)
    for ax, kind in ((ax_t, "ttft"), (ax_e, "e2e")):
        check = next((c for c in checks if c.kind == kind and c.quantile is not None), None)
        if check is not None:
            ax.axhline(check.target, color="0.3", ls="--", lw=1, label=f"{check.name} {check.target:g} s")
            ax.legend(fontsize=7, loc="upper left")
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(ScalarFormatter())
        ax.tick_params(axis="y", which="minor", labelsize=6)
    ax_r.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_r.set_ylabel("replicas added\n(asked · ready)")
    ax_q.set_ylabel("requests waiting")
    ax_t.set_ylabel("TTFT p95 (s)\nper 5 s of arrivals")
    ax_e.set_ylabel("E2E p95 (s)\nper 5 s of arrivals")
    ax_e.set_xlabel("seconds from the first arrival")
    ax_r.set_title("the load on an autoscaled fleet (solid: warm replicas; dashed: one fewer)", fontsize=9)
    ax_r.legend(fontsize=7, ncol=2)
    for ax in (ax_r, ax_q, ax_t, ax_e):
        ax.grid(alpha=0.3)
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)  # type: ignore[no-untyped-call]  # the Agg backend is not annotated
    return buf.getvalue()
