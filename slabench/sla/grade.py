"""The grader: a contract and per-level estimates → PASS / CONDITIONAL / FAIL, with every check's reason. Pure.

How one check is judged (lower-is-better shown; higher-is-better is the mirror image, with the CI lower bound):
- with repeats (n ≥ 2 and a 95% CI): PASS when the CI's upper bound meets the target; CONDITIONAL when the mean
  meets it but the interval crosses it, or the mean misses it by no more than the conditional band; FAIL otherwise;
- with one run there is no interval: the observed value is compared, and the reason says the verdict rests on a
  single run (a contract can demand `min_repeats`, capping single runs at CONDITIONAL);
- soft checks never FAIL: a miss is CONDITIONAL;
- a metric with no data can never PASS: "no data" FAILS a hard check and is CONDITIONAL for a soft one.
The overall verdict is the worst check at the contract's load.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from slabench.core.schema import VERDICT
from slabench.sla.capacity import CapacityReport, capacity_report
from slabench.sla.contract import CheckSpec, Contract
from slabench.sla.cost import CostLine, ReplicaPrice, cost_lines
from slabench.sla.estimates import Estimate, LevelEstimates, with_metrics

SCHEMA_VERSION = VERDICT.major


class Status(enum.StrEnum):
    PASS = "PASS"
    CONDITIONAL = "CONDITIONAL"
    FAIL = "FAIL"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Status.PASS: 0, Status.CONDITIONAL: 1, Status.FAIL: 2}


def worst(statuses: Iterable[Status]) -> Status:
    return max(statuses, key=lambda s: s.rank, default=Status.PASS)


def fmt(value: float | None, unit: str) -> str:
    """A value in its unit, for people: 0.1234 s → 123.4 ms, 0.0123 share → 1.23%."""
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "unbounded"
    if unit == "s":
        return f"{value * 1000:.4g} ms" if abs(value) < 1 else f"{value:.4g} s"
    if unit == "share":
        return f"{value * 100:.4g}%"
    if unit == "USD":
        return f"${value:.4g}"
    return f"{value:,.4g} {unit}"


@dataclass(frozen=True, slots=True)
class CheckResult:
    check: str
    metric: str
    unit: str
    direction: str  # "max" | "min"
    target: float
    conditional_band: float
    severity: str
    status: Status
    observed: float | None  # the mean across repeats (the single value for one run)
    bound: float | None  # the figure compared with the target: CI upper bound (max) / lower bound (min), or observed
    ci95_low: float | None
    ci95_high: float | None
    n: int  # repeats
    samples: int | None  # requests behind the figure
    single_run: bool
    no_data: bool
    reason: str


def evaluate(spec: CheckSpec, est: Estimate | None, where: str, min_repeats: int = 1) -> CheckResult:
    """Judge one check against one estimate. `where` names the level for the reason."""
    t = spec.target
    lower_better = t.direction == "max"
    target: float = t.threshold
    band: float = t.conditional_band
    unit = spec.unit
    op, anti = ("≤", ">") if lower_better else ("≥", "<")
    target_text = f"target {op} {fmt(target, unit)}"

    def result(status: Status, reason: str, **kw: Any) -> CheckResult:
        return CheckResult(
            spec.name, spec.metric, unit, t.direction, target, band, t.severity, status, **kw, reason=reason
        )

    if est is None or est.mean is None:
        hard = t.severity == "hard"
        consequence = "a hard check without data FAILS" if hard else "a soft check without data is CONDITIONAL"
        return result(
            Status.FAIL if hard else Status.CONDITIONAL,
            f"no data: {spec.metric} was not measured at {where} — {consequence} (never a silent pass)",
            observed=None,
            bound=None,
            ci95_low=None,
            ci95_high=None,
            n=est.n if est else 0,
            samples=None,
            single_run=False,
            no_data=True,
        )

    def meets(x: float) -> bool:
        return x <= target if lower_better else x >= target

    def in_band(x: float) -> bool:
        return x <= target + band if lower_better else x >= target - band

    low, high = est.ci95_low, est.ci95_high
    ci = (low, high) if low is not None and high is not None else None  # set exactly when est.has_interval
    interval = ci is not None
    single = est.n <= 1
    bound = (ci[1] if lower_better else ci[0]) if ci is not None else est.mean
    mean_text = fmt(est.mean, unit)
    if interval:
        which = "upper" if lower_better else "lower"
        basis = f"95% CI {which} bound {fmt(bound, unit)} (value {mean_text}, n={est.n} run(s); {est.interval})"
    elif single:
        basis = f"single run, no confidence interval: observed {mean_text}"
    else:
        basis = f"mean {mean_text} over n={est.n} runs but no confidence interval ({est.interval})"

    if meets(bound):
        status, reason = Status.PASS, f"{basis} {op} {fmt(target, unit)}"
    elif meets(est.mean):
        status = Status.CONDITIONAL
        reason = f"mean {mean_text} meets {target_text}, but the {basis} crosses it: not proven"
    elif band > 0 and in_band(est.mean):
        edge = target + band if lower_better else target - band
        status = Status.CONDITIONAL
        reason = f"{basis} misses {target_text} but is within the conditional band (to {fmt(edge, unit)})"
    else:
        status = Status.FAIL
        band_text = f" and its conditional band ({fmt(band, unit)})" if band > 0 else ""
        reason = f"{basis}: {'mean ' if interval else ''}{mean_text} {anti} {fmt(target, unit)}{band_text}"
        if ci is not None and meets(ci[0] if lower_better else ci[1]):
            reason += " (the interval reaches the target, but the mean does not meet it)"
    if status is Status.FAIL and t.severity == "soft":
        status = Status.CONDITIONAL
        reason += "; soft check: a miss is CONDITIONAL, not FAIL"
    if status is Status.PASS and not single and not interval:
        status = Status.CONDITIONAL
        reason += "; without an interval a PASS cannot be proven → CONDITIONAL"
    if status is Status.PASS and est.low_samples:
        status = Status.CONDITIONAL
        reason += "; too few samples behind this figure to PASS → CONDITIONAL"
    if status is Status.PASS and est.n < min_repeats:
        status = Status.CONDITIONAL
        reason += f"; only {est.n} run(s), the contract asks for ≥ {min_repeats} before a PASS → CONDITIONAL"
    if single:
        reason += "; the verdict rests on a single run"
    if est.low_samples:
        behind = est.samples if est.samples is not None else "too few"
        reason += f"; few samples: this figure rests on {behind} requests"
    return result(
        status,
        reason,
        observed=est.mean,
        bound=bound,
        ci95_low=est.ci95_low,
        ci95_high=est.ci95_high,
        n=est.n,
        samples=est.samples,
        single_run=single,
        no_data=False,
    )


@dataclass(frozen=True, slots=True)
class LevelVerdict:
    level: LevelEstimates
    status: Status
    checks: tuple[CheckResult, ...]
    cost: dict[str, CostLine]


def grade_level(
    contract: Contract, replica: ReplicaPrice, level: LevelEstimates, specs: Sequence[CheckSpec] | None = None
) -> LevelVerdict:
    """Every check of the contract at one level (costs derived from that level's throughput)."""
    costs = cost_lines(replica.total_usd_per_hour, level)
    full = with_metrics(level, {k: c.estimate for k, c in costs.items() if c.estimate is not None})
    specs = contract.checks() if specs is None else specs
    checks = tuple(evaluate(s, full.get(s.metric), level.level.label, contract.min_repeats) for s in specs)
    status = worst(c.status for c in checks)
    if level.reached is False and status is Status.PASS:  # its figures stand for a lighter load
        status = Status.CONDITIONAL
    return LevelVerdict(full, status, checks, costs)


UNMEASURED = Estimate(mean=None, n=0, interval="none: not measured")  # a cost line whose rate was not measured


@dataclass(frozen=True)
class Verdict:
    contract: str
    sla_file: str
    source: str
    load: str  # the contract's load
    graded_level: str | None  # the tested level that stood for it (None: not tested)
    status: Status
    single_run: bool
    summary: str
    checks: list[CheckResult]
    deployment: ReplicaPrice
    cost: list[CostLine]
    capacity: CapacityReport
    levels: list[tuple[str, Status]]  # every tested level's own verdict against the same checks
    notes: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)  # why the evidence is incomplete: exit 4 whatever the status
    records_sha256: dict[str, str] = field(default_factory=dict)  # the records files graded, by content hash
    measured_load: float | None = None  # the load the graded level held, in its unit (users or req/s)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        def clean(x: Any) -> Any:  # JSON has no infinity: an unbounded figure is null (its text says "unbounded")
            if isinstance(x, float) and not math.isfinite(x):
                return None
            if isinstance(x, dict):
                return {k: clean(v) for k, v in x.items()}
            if isinstance(x, list | tuple):
                return [clean(v) for v in x]
            return x

        d: dict[str, Any] = {
            "schema_version": self.schema_version,
            "schema_minor": VERDICT.minor,
            "kind": VERDICT.kind,
            "verdict": str(self.status),
            "measurement": "incomplete" if self.incomplete else "complete",
            "incomplete": list(self.incomplete),
            "summary": self.summary,
            "contract": self.contract,
            "sla_file": self.sla_file,
            "source": self.source,
            "load": self.load,
            "graded_level": self.graded_level,
            "measured_load": self.measured_load,
            "single_run": self.single_run,
            "checks": [{**asdict(c), "status": str(c.status)} for c in self.checks],
            "deployment": {
                **asdict(self.deployment),
                "total_usd_per_hour": self.deployment.total_usd_per_hour,
                "arithmetic": self.deployment.arithmetic(),
            },
            "cost": [
                {
                    "metric": c.metric,
                    **asdict(c.estimate or UNMEASURED),
                    "arithmetic": c.arithmetic,
                }
                for c in self.cost
            ],
            "capacity": self.capacity.to_dict(),
            "levels": [{"level": label, "verdict": str(s)} for label, s in self.levels],
            "notes": list(self.notes),
            "records_sha256": dict(self.records_sha256),
        }
        out: dict[str, Any] = clean(d)  # the same keys, infinities made null
        return out


def _no_level_checks(specs: Sequence[CheckSpec], load: str, tested: list[str]) -> list[CheckResult]:
    out = []
    for s in specs:
        r = evaluate(s, None, load)
        out.append(
            CheckResult(**{**asdict(r), "reason": f"{r.reason}; the run tested {', '.join(tested) or 'nothing'}"})
        )
    return out


def grade(
    contract: Contract,
    replica: ReplicaPrice,
    levels: Sequence[LevelEstimates],
    *,
    source: str = "",
    sla_file: str = "",
    notes: Sequence[str] = (),
    incomplete: Sequence[str] = (),
) -> Verdict:
    """Grade a run (or sweep) against a contract. `levels` are every tested level; the contract's load picks one.
    `incomplete`: why the evidence is incomplete (a lost worker, saturation); it caps a PASS at CONDITIONAL and
    marks the verdict incomplete (exit 4)."""
    specs = contract.checks()
    verdicts = [grade_level(contract, replica, lv, specs) for lv in levels]
    notes = list(notes)
    match = [v for v in verdicts if contract.load.matches(v.level.level)]
    if not match and len(verdicts) == 1 and verdicts[0].level.level.unstaged:
        # One run whose records say nothing of its load: take it as the contract's load, and say so.
        as_level = contract.load.as_level()
        measured = verdicts[0].level.measured_load
        reached = (
            measured >= as_level.concurrency if measured is not None and as_level.concurrency is not None else None
        )  # the users the run held against the contract's (a plain run's measured load is in users)
        assumed = dataclasses.replace(verdicts[0].level, level=as_level, reached=reached)
        verdicts = [grade_level(contract, replica, assumed, specs)]
        match = verdicts
        notes.append(
            f"the records carry no stage (load level); the run was graded as {contract.load.label}, the contract's "
            "load — make sure it ran at that load"
        )
    if len(match) > 1:
        notes.append(f"{len(match)} tested levels stand for {contract.load.label}; graded the first")
    chosen = match[0] if match else None
    if chosen is not None:
        checks = list(chosen.checks)
        cost = [chosen.cost[k] for k in chosen.cost]
        notes.extend(chosen.level.notes)
    else:
        checks = _no_level_checks(specs, contract.load.label, [v.level.level.label for v in verdicts])
        cost = []
    status = worst(c.status for c in checks)
    short = chosen.level.not_reached() if chosen is not None else None
    incomplete = [*incomplete, short] if short else list(incomplete)
    notes.extend(incomplete)
    if incomplete and status is Status.PASS:
        status = Status.CONDITIONAL
        notes.append("every check passed, but on incomplete evidence: CONDITIONAL")
    single = chosen is not None and not any(e.n >= 2 for e in chosen.level.metrics.values())
    counts = {s: sum(c.status is s for c in checks) for s in Status}
    dep = contract.deployment
    measured = chosen.level.measured_load if chosen is not None else None
    unit = "req/s" if chosen is not None and chosen.level.level.rate_rps is not None else "users"
    held = f" (measured {measured:.3g} {unit})" if measured is not None else ""
    summary = (
        f"{status}: {contract.name} at {contract.load.label}{held} on {dep.replicas} × {replica.instance_type}"
        f" — {len(checks)} checks: {counts[Status.PASS]} PASS, {counts[Status.CONDITIONAL]} CONDITIONAL, "
        f"{counts[Status.FAIL]} FAIL"
    )
    if single:
        summary += " — single run: the verdict rests on a single run, without confidence intervals"
    if chosen is None:
        summary += f" — the run has no data at {contract.load.label}"
    if incomplete:
        summary += f" — measurement incomplete: {'; '.join(incomplete)}"
    target_rps = contract.capacity.target_load_rps if contract.capacity else None
    short_of = {
        v.level.level.label: [(c.check, str(c.status)) for c in v.checks if c.status is not Status.PASS]
        for v in verdicts
    }
    capacity = capacity_report([(v.level, v.status) for v in verdicts], replica, target_rps, short_of)
    return Verdict(
        contract=contract.name,
        sla_file=sla_file,
        source=source,
        load=contract.load.label,
        graded_level=chosen.level.level.label if chosen else None,
        measured_load=measured,
        status=status,
        single_run=single,
        summary=summary,
        checks=checks,
        deployment=replica,
        cost=cost,
        capacity=capacity,
        levels=[(v.level.level.label, v.status) for v in verdicts],
        notes=notes,
        incomplete=list(incomplete),
    )


EXIT_CODES = {Status.PASS: 0, Status.CONDITIONAL: 1, Status.FAIL: 2}
