"""Capacity answers beyond one level. Pure.

- The highest tested level (concurrency or rate) at which *every* check of the contract PASSES.
- For a target load (e.g. the burst's mean, 103 req/s): replicas needed = ⌈target ÷ per-replica throughput at that
  level⌉, and their hourly cost. Per-replica throughput is the measured successful req/s at that level divided by the
  replicas that served it, taken conservatively: the 95% CI lower bound when there are repeats, else the single
  run's value. Assumption (stated in every answer): replicas behind the load balancer scale linearly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from slabench.sla.contract import UTILIZATION_CHECKS
from slabench.sla.cost import ReplicaPrice
from slabench.sla.estimates import LevelEstimates

LINEAR = (
    "assumes replicas behind the load balancer scale linearly and the load comes evenly at its mean rate; "
    "`slabench plan` replays its arrivals, bunching and queue included"
)


@dataclass(frozen=True)
class CapacityReport:
    instance_type: str
    tested: list[tuple[str, str]]  # (level, verdict) on the load axis, lowest first
    highest_passing: str | None
    target_load_rps: float | None = None
    per_replica_rps: float | None = None
    rps_basis: str = ""
    replicas_needed: int | None = None
    usd_per_hour: float | None = None
    arithmetic: str = ""
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tested"] = [{"level": lv, "verdict": v} for lv, v in self.tested]
        return d


def _below_notes(below: Sequence[str], short_of: Mapping[str, Sequence[tuple[str, str]]]) -> list[str]:
    """Why lower levels did not pass, in three kinds: a latency, error or quality check FAILED there (a capacity
    answer to distrust); only throughput floors or per-unit costs missed (the replica is under-used, not too slow);
    or nothing failed, some check is only not proven (too little evidence)."""
    kinds: dict[str, list[str]] = {"failed": [], "under-used": [], "unproven": []}
    for label in below:
        missed = short_of.get(label, ())
        if not missed or any(s == "FAIL" and c not in UTILIZATION_CHECKS for c, s in missed):
            kind = "failed"
        elif any(c in UTILIZATION_CHECKS for c, _ in missed):
            kind = "under-used"
        else:
            kind = "unproven"
        checks = ", ".join(f"{c} {s}" for c, s in missed)
        kinds[kind].append(f"{label}: {checks}" if checks else label)
    why = {
        "failed": "failed on latency, errors or quality ({}): look at those runs before trusting this",
        "under-used": "under-use the replica ({}): they miss throughput or cost floors only — too little load for "
        "the card, not a capacity limit",
        "unproven": "are not proven ({}): too little evidence to PASS, nothing failed",
    }
    return [f"lower levels {why[k].format('; '.join(v))}" for k, v in kinds.items() if v]


def capacity_report(
    graded: Sequence[tuple[LevelEstimates, str]],
    replica: ReplicaPrice,
    target_rps: float | None,
    short_of: Mapping[str, Sequence[tuple[str, str]]] | None = None,
) -> CapacityReport:
    """`graded`: every tested level with its verdict against all of the contract's checks; `short_of`: per level
    label, the (check, status) that did not pass there (tells an under-used level from an overloaded one)."""
    # (position on the load axis, level, verdict): scenarios and unstaged runs have no position
    axis = sorted(
        ((order, lv, str(s)) for lv, s in graded if (order := lv.level.order) is not None), key=lambda p: p[0]
    )
    tested = [(lv.level.label, s) for _, lv, s in axis]
    notes: list[str] = []
    passing = [(order, lv) for order, lv, s in axis if s == "PASS"]
    if not axis:
        notes.append("no concurrency or rate levels were tested (only a scenario or an unstaged run)")
        return CapacityReport(replica.instance_type, tested, None, target_rps, notes=notes)
    if not passing:
        notes.append("no tested level passes every check")
        return CapacityReport(replica.instance_type, tested, None, target_rps, notes=notes)
    best_order, best = passing[-1]
    below = [lv.level.label for order, lv, s in axis if order < best_order and s != "PASS"]
    notes.extend(_below_notes(below, short_of or {}))
    report = CapacityReport(replica.instance_type, tested, best.level.label, target_rps, notes=notes)
    thr = best.get("throughput_rps")
    if thr is None or thr.mean is None:  # (get() already leaves out an estimate without a mean)
        notes.append(f"no throughput measured at {best.level.label}; replicas cannot be sized")
        return report
    if thr.ci95_low is not None and thr.ci95_high is not None:  # thr.has_interval, spelled out for the type checker
        rps, basis = thr.ci95_low, f"95% CI lower bound over {thr.n} runs (mean {thr.mean:.4g})"
    else:
        rps, basis = thr.mean, "single run" if thr.n <= 1 else f"mean over {thr.n} runs, no interval"
    per_replica = rps / replica.replicas
    if target_rps is None:
        return CapacityReport(
            replica.instance_type,
            tested,
            best.level.label,
            None,
            per_replica,
            basis,
            notes=notes,
            arithmetic=f"{best.level.label}: {rps:.4g} req/s ({basis}) ÷ {replica.replicas} replica(s) = "
            f"{per_replica:.4g} req/s per replica",
        )
    if per_replica <= 0:
        notes.append(f"per-replica throughput at {best.level.label} is {per_replica:.4g} req/s; cannot size")
        return CapacityReport(
            replica.instance_type, tested, best.level.label, target_rps, per_replica, basis, notes=notes
        )
    needed = math.ceil(target_rps / per_replica - 1e-9)
    usd = needed * replica.per_replica_usd_per_hour
    arithmetic = (
        f"{best.level.label}: {rps:.4g} req/s ({basis}) ÷ {replica.replicas} replica(s) = {per_replica:.4g} req/s "
        f"per replica; {target_rps:g} req/s ÷ {per_replica:.4g} = {target_rps / per_replica:.3f} → {needed} "
        f"replica(s) × ${replica.per_replica_usd_per_hour:.5g}/h = ${usd:.5g}/h on {replica.instance_type} ({LINEAR})"
    )
    return CapacityReport(
        replica.instance_type, tested, best.level.label, target_rps, per_replica, basis, needed, usd, arithmetic, notes
    )
