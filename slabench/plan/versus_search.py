"""`slabench plan --compare-search SWEEP_DIR`: the plan's highest passing concurrency beside the one `slabench sweep
--search` measured, for the same workload and contract.

The search left `search.json` (its range, tolerance and bracket) and `sweep.json` (how long each run lasted) in its
sweep directory, with every run's records. The plan replays, on one replica of each profile, closed loops of c users
sending the searched runs' own requests (their prompt and answer lengths, in the order sent) for as long as a run of
the sweep lasted (its `duration_s`, or its `requests`); it bisects c over the search's range to the search's
tolerance with the search's own rule (`slabench.sweep.search.Search`), at the model's step time and at both ends of
the profile's 90 % step-time interval. A level passes when every latency and error-rate check of the contract meets
its target on the predicted figures — the checks the search bisects on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from slabench.core.errors import UserError
from slabench.plan.checks import Check, judge
from slabench.plan.replay import replay
from slabench.plan.workload import Mix, PlannedLoad
from slabench.sim.profiles import EngineConfig
from slabench.sla.grade import Status
from slabench.sweep.search import Search


@dataclass(frozen=True)
class SearchedSweep:
    """What a `sweep --search` directory says: its bracket, and the workload every level ran."""

    path: Path
    low: int
    high: int
    tolerance: int
    passed: int | None  # the highest level that passed (None: not even the lowest)
    failed: int | None  # the lowest that did not (None: every level searched passed)
    mix: Mix  # the searched runs' requests, in the order sent
    duration_s: float | None  # each run: this long, or
    requests: int | None  # this many records
    warmup_s: float


def read_searched_sweep(sweep_dir: str | Path) -> SearchedSweep:
    """The search's result and workload; a UserError naming the file when it is not a finished search."""
    from slabench.core.boundary import loads
    from slabench.core.runcap import capped
    from slabench.core.schema import SWEEP
    from slabench.plan.calibrate import read_runs
    from slabench.sweep.config import SweepConfig
    from slabench.sweep.runner import read_json

    d = Path(sweep_dir)
    hint = "run `slabench sweep --config FILE --sla CONTRACT --search` first, and give its sweep directory"
    path = d / "search.json"
    try:
        doc = loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise UserError(f"--compare-search {d}: no search.json in it — {hint}") from None
    except ValueError as e:
        raise UserError(f"{path}: not JSON ({e}) — the search's own file, damaged; run the search again") from None
    if not isinstance(doc, dict) or doc.get("kind") != "slabench.sweep_search":
        raise UserError(f"{path}: not a search result (kind must be slabench.sweep_search) — {hint}")
    low, high, tol = _range(doc, path)
    passed, failed = (_level(doc, k, low, high, path) for k in ("highest_passing", "lowest_failing"))
    if passed is not None and failed is not None and passed >= failed:
        raise UserError(f"{path}: highest_passing {passed} is not below lowest_failing {failed} — edited by hand?")
    sweep = read_json(d / "sweep.json", SWEEP)
    if sweep is None or not isinstance(sweep.get("config"), dict):
        raise UserError(f"{d / 'sweep.json'}: missing or unreadable — the search's sweep directory holds one")
    try:
        cfg = SweepConfig.model_validate(sweep["config"])
    except ValueError as e:
        first = str(e).splitlines()[1:2] or [str(e)]
        raise UserError(f"{d / 'sweep.json'}: config is not a sweep config ({first[0].strip()})") from None
    runs = sorted(read_runs([d]), key=lambda r: r.users)
    mix = Mix(
        prompt_tokens=np.concatenate([r.mix.prompt_tokens for r in runs]),
        output_tokens=np.concatenate([r.mix.output_tokens for r in runs]),
        prefix_tokens=np.concatenate([r.mix.prefix_tokens for r in runs]),
        accounts=tuple(a for r in runs for a in r.mix.accounts),
        max_tokens=max(r.mix.max_tokens for r in runs),
        source=f"the requests of {d}'s {len(runs)} run(s)",
    )
    duration = capped(cfg.run.duration_s) if cfg.run.duration_s is not None else None  # as the sweep ran it
    return SearchedSweep(d, low, high, tol, passed, failed, mix, duration, cfg.run.requests, cfg.run.warmup_s)


def _range(doc: dict[str, Any], path: Path) -> tuple[int, int, int]:
    r, tol = doc.get("range"), doc.get("tolerance")
    if isinstance(r, list) and len(r) == 2 and isinstance(tol, int):
        low, high = r
        if all(map(_whole, (low, high, tol))) and 1 <= low < high and tol >= 1:
            return int(low), int(high), tol
    raise UserError(f"{path}: range must be [low, high] users (1 ≤ low < high) and tolerance ≥ 1 — the search's own")


def _level(doc: dict[str, Any], key: str, low: int, high: int, path: Path) -> int | None:
    v = doc.get(key)
    if v is None:
        return None
    if not (isinstance(v, int) and not isinstance(v, bool) and low <= v <= high):
        raise UserError(f"{path}: {key}: {v!r} — must be a level within the range {low}–{high}, or null")
    return int(v)


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@dataclass
class PlannedSearch:
    """The plan's bisection at one step time: its bracket and, per level tried, the check that kept it from
    passing."""

    search: Search
    why: dict[int, str] = field(default_factory=dict)


def level_passes(config: EngineConfig, searched: SearchedSweep, users: int, checks: list[Check]) -> tuple[bool, str]:
    """One replica, `users` closed-loop users sending the searched requests for as long as a run lasted."""
    load = PlannedLoad(
        f"{users} users",
        f"{users} closed-loop users",
        searched.mix,
        users=users,
        duration_s=searched.duration_s,
        max_requests=searched.requests,
    )
    figures = replay(config, load, 1, drain_timeout=1e6).figures
    missed = [j for j in judge(checks, figures) if not j.meets]
    why = "; ".join(
        f"{j.check.name} {'no figure' if j.value is None else f'{j.value:.3g}'} > {j.check.target:g}" for j in missed
    )
    return not missed, why or "every check met"


def plan_search(
    config: EngineConfig, searched: SearchedSweep, checks: list[Check], slowdown: Callable[[int], float] | None = None
) -> PlannedSearch:
    """Bisect as the search did (its range and tolerance), on predicted figures; `slowdown(users)`: every step that
    many times as long at that level (an end of the 90 % interval), None: the profile's step time."""
    out = PlannedSearch(Search(searched.low, searched.high, searched.tolerance))
    while (level := out.search.next_level()) is not None:
        at = config if slowdown is None else replace(config, gpu=config.gpu.slowed(slowdown(level)))
        ok, why = level_passes(at, searched, level, checks)
        out.search.record(level, Status.PASS if ok else Status.FAIL, why)
        out.why[level] = why
    return out


@dataclass
class Comparison:
    profile: str
    factor: float  # the 90 % step-time interval, ×1/f … ×f (within the levels a calibration saw)
    model: PlannedSearch
    pessimistic: PlannedSearch  # every step f times as long: the fewest users
    optimistic: PlannedSearch
    levels: tuple[float, float] | None = None  # a calibrated profile's users seen: beyond them f widens

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "step_time_factor_90": self.factor,
            "levels_seen": list(self.levels) if self.levels else None,
            "highest_passing": self.model.search.passed,
            "lowest_failing": self.model.search.failed,
            "interval_90": [self.pessimistic.search.passed, self.optimistic.search.passed],
            "steps": [{"level": s.level, "status": s.status, "why": s.why} for s in self.model.search.steps],
        }


def compare(config: EngineConfig, searched: SearchedSweep, checks: list[Check], factor: float | None) -> Comparison:
    """`factor`: a fixed 90 % step-time factor (--step-time-factor); None: the profile's, at each level
    (`Uncertainty.factor_at`: widened beyond the users a calibration saw)."""
    u = config.gpu.uncertainty
    at: Callable[[float], float] = (lambda _: factor) if factor else u.factor_at
    return Comparison(
        config.gpu.name,
        factor or u.step_time_factor_90,
        plan_search(config, searched, checks),
        plan_search(config, searched, checks, lambda c: at(c)),
        plan_search(config, searched, checks, lambda c: 1 / at(c)),
        None if factor else u.levels,
    )


def answer_text(s: Search) -> str:
    """The highest passing level, as a number the user can compare: "< low" when none passed, "≥ high" when all
    did."""
    if s.passed is None:
        return f"< {s.low}"
    if s.failed is None:
        return f"≥ {s.high}"
    return str(s.passed)


def within(value: Search, low: Search, high: Search) -> bool:
    """Whether `value`'s bracket overlaps the interval from `low`'s answer to `high`'s (both ends' brackets)."""
    lo = low.passed if low.passed is not None else value.low - 1
    hi = (high.failed - 1) if high.failed is not None else math.inf
    v_lo = value.passed if value.passed is not None else value.low - 1
    v_hi = (value.failed - 1) if value.failed is not None else math.inf
    return v_lo <= hi and lo <= v_hi


def verdict(searched: SearchedSweep, c: Comparison) -> str:
    """Whether the search's answer lies within the plan's 90 % interval, and what follows."""
    measured = Search(searched.low, searched.high, searched.tolerance, searched.passed, searched.failed)
    if within(measured, c.pessimistic.search, c.optimistic.search):
        return f"{c.profile}: the search's bracket lies within the plan's 90 % interval — they agree."
    return (
        f"{c.profile}: the search's bracket lies outside the plan's 90 % interval — the profile does not describe "
        f"this server: calibrate it from this sweep (slabench calibrate {searched.path} ...)."
    )


def which_to_believe(searched: SearchedSweep) -> str:
    return (
        "Believe the search for this server and these flags: it measured them, each check on its confidence bound "
        "over the repeats, to within its tolerance. The plan carries that answer to loads, flags and fleets not "
        "measured. Where they differ: the search grades a bound (stricter than one prediction) and stops within its "
        "tolerance; the plan predicts one run from the profile's step time"
        + (f"; the sweep leaves out each run's first {searched.warmup_s:g} s" if searched.warmup_s else "")
        + "."
    )


def measured_range(s: SearchedSweep) -> str:
    if s.passed is None:
        return f"the lowest searched, {s.low}, fails"
    if s.failed is None:
        return f"every level to {s.high} passes"
    return f"{s.passed} passes, {s.failed} fails (tolerance {s.tolerance})"


class ComparisonView:
    """One small table: the search's answer with its bracket over the plan's with its interval, per profile; then
    which to believe. Reads at 80 columns."""

    def __init__(self, searched: SearchedSweep, contract: str, comparisons: list[Comparison]) -> None:
        self.searched, self.contract, self.comparisons = searched, contract, comparisons

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        s = self.searched
        measured = Search(s.low, s.high, s.tolerance, s.passed, s.failed)
        table = Table(
            title=f"highest concurrency passing {self.contract}'s latency and error checks", title_justify="left"
        )
        for head in ("answer", "users", "range"):
            table.add_column(head, justify="right" if head == "users" else "left", overflow="fold")
        table.add_row("sweep --search (measured)", answer_text(measured), measured_range(s))
        for c in self.comparisons:
            lo, hi = answer_text(c.pessimistic.search), answer_text(c.optimistic.search)
            span = lo if lo == hi else f"{lo} to {hi}"
            table.add_row(
                f"plan: {c.profile}", answer_text(c.model.search), f"90 %: {span} (step time ×÷{c.factor:.3g})"
            )
        yield table
        yield Text(f"Searched {s.low}–{s.high} users on {s.mix.source}.")
        for c in self.comparisons:
            yield Text(verdict(s, c))
        for c in self.comparisons:
            if c.levels:
                seen_lo, seen_hi = c.levels
                yield Text(
                    f"{c.profile} was calibrated at {seen_lo:g}–{seen_hi:g} users: at a level r times beyond them "
                    f"its interval is ×÷{c.factor:.3g}^r."
                )
        yield Text(which_to_believe(s))
