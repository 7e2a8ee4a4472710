"""The SLA contract's latency checks, as a plan judges predicted figures against them. Pure.

A plan sizes the fleet on what the simulator predicts: TTFT (from the schedule: in virtual time a request is sent
when it is due), ITL, TPOT and E2E ceilings at any percentile or mean, and the error and incomplete rates. Cost and
throughput checks are the plan's *output* (it prices each answer), and quality floors are the model's, not the
fleet's, so they are left out. A predicted figure meets its check when it is at or below the target; the
prediction's uncertainty is not a conditional band here but a second search: the plan is sized where every check is
met with each step as slow as the profile's 90 % interval allows (`slabench.plan.search`), so conditional bands play
no part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slabench.sla.contract import LoadedContract

LATENCY_KINDS = ("ttft", "itl", "tpot", "e2e")
RATE_CHECKS = ("error_rate", "incomplete_rate")
STATS = {"p50": 0.50, "p90": 0.90, "p95": 0.95, "p99": 0.99, "mean": None}


@dataclass(frozen=True, slots=True)
class Check:
    name: str  # as written in the contract, e.g. "ttft_p95_s"
    metric: str  # the figure it judges, e.g. "ttft_p95"
    kind: str  # ttft | itl | tpot | e2e | error_rate | incomplete_rate
    quantile: float | None  # 0.95 for p95; None for a mean or a rate
    target: float
    severity: str

    @property
    def per_request_deadline(self) -> bool:
        """A percentile of TTFT or E2E: a request still without its first (or last) token `target` seconds after
        it was due is already a miss, so a fleet can be failed before its run ends."""
        return self.kind in ("ttft", "e2e") and self.quantile is not None


def latency_checks(loaded: LoadedContract) -> list[Check]:
    """The checks of a loaded contract (`sla.contract.LoadedContract`) a plan sizes on; a UserError if none."""
    targets = loaded.contract.targets
    out = []
    for kind in LATENCY_KINDS:
        for stat, q in STATS.items():
            name = f"{kind}_{stat}_s"
            t = getattr(targets, name)
            if t is not None:
                out.append(Check(name, f"{kind}_{stat}", kind, q, float(t.max), t.severity))
    for name in RATE_CHECKS:
        t = getattr(targets, name)
        if t is not None:
            out.append(Check(name, name, name, None, float(t.max), t.severity))
    if not any(c.kind in LATENCY_KINDS for c in out):
        raise loaded.error(
            ("targets",),
            "no latency checks to size a fleet on — add at least one of ttft_/itl_/tpot_/e2e_ × p50/p90/p95/p99/mean "
            "(e.g. `ttft_p95_s: {max: 2.0}`)",
        )
    return out


@dataclass(frozen=True, slots=True)
class Judged:
    check: Check
    value: float | None
    meets: bool
    margin: float | None  # (target − value) / target: the share of the target still free (negative: missed)


def judge(checks: list[Check], figures: dict[str, float | None]) -> list[Judged]:
    out = []
    for c in checks:
        v = figures.get(c.metric)
        if v is None or math.isnan(v):
            out.append(Judged(c, None, False, None))  # no data never passes
            continue
        meets = v <= c.target
        if c.target > 0:
            margin = (c.target - v) / c.target if math.isfinite(v) else -math.inf
        else:
            margin = 0.0 if v <= 0 else -math.inf
        out.append(Judged(c, v, meets, margin))
    return out


def binding(judged: list[Judged]) -> Judged | None:
    """The check with the least margin (the one that decides the replica count)."""
    scored = [j for j in judged if j.margin is not None]
    if not scored:
        return None
    return min(scored, key=lambda j: math.inf if j.margin is None else j.margin)
