"""`slabench sweep --search`: the highest concurrency whose capacity checks pass, found by bisection with repeats.

A grid sweep spends its runs on levels set in advance. A search spends them where the answer is: it runs the
config's lowest and highest level (each with the config's repeats), then the middle of the bracket between the
highest level that passed and the lowest that did not, until the bracket is within the tolerance. Every level is a
normal sweep level under the same directory (records, manifests, summary, report), so the result is graded and
reported like any sweep; `search.json` beside them says how the answer was found.

A level *passes* when every capacity check of the contract PASSes there on its confidence bound: the latency
ceilings (TTFT, ITL, TPOT, E2E) and the error rate, which only get worse as load grows — the property bisection
needs. Floors (throughput, output tokens/s), costs and quality are left out of the search: a floor fails at low
load, where the card is under-used, not over-run. A CONDITIONAL level (an interval across a target) does not pass.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slabench.analysis.summary import SweepSummary
from slabench.core.errors import UserError
from slabench.sla.contract import CheckSpec, LoadedContract
from slabench.sla.grade import Status, grade_level

CAPACITY_METRICS = ("ttft_", "itl_", "tpot_", "e2e_", "error_rate")


def capacity_checks(specs: Sequence[CheckSpec]) -> list[CheckSpec]:
    """The checks that bound a figure from above that rises with load: latencies and the error rate."""
    return [s for s in specs if s.metric.startswith(CAPACITY_METRICS) and getattr(s.target, "max", None) is not None]


@dataclass
class Step:
    level: int
    status: str  # PASS | CONDITIONAL | FAIL (the capacity checks' worst)
    why: str  # the checks that kept it from passing, or "every capacity check passed"


@dataclass
class Search:
    """The bracket as it narrows. `passed`: the highest level that passed (None: none yet); `failed`: the lowest
    that did not (None: none yet)."""

    low: int
    high: int
    tolerance: int
    passed: int | None = None
    failed: int | None = None
    steps: list[Step] = field(default_factory=list)

    def next_level(self) -> int | None:
        """The level to run next, or None when the search is done."""
        tested = {s.level for s in self.steps}
        if self.low not in tested:
            return self.low
        if self.passed is None:
            return None  # the lowest level did not pass: nothing below the range is searched
        if self.high not in tested:
            return self.high
        if self.failed is None or self.failed - self.passed <= self.tolerance:
            return None
        return (self.passed + self.failed) // 2

    def record(self, level: int, status: Status, why: str) -> None:
        self.steps.append(Step(level, str(status), why))
        if status is Status.PASS:
            self.passed = max(level, self.passed or level)
        elif self.failed is None or level < self.failed:
            self.failed = level

    def answer(self) -> str:
        if self.passed is None:
            return f"no level passes: the lowest searched, {self.low}, does not (search below it)"
        if self.failed is None:
            return f"every level passes up to the highest searched, {self.high} (search above it)"
        return (
            f"{self.passed} concurrent users is the highest that passes; {self.failed} does not "
            f"(tolerance {self.tolerance})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "slabench.sweep_search",
            "range": [self.low, self.high],
            "tolerance": self.tolerance,
            "highest_passing": self.passed,
            "lowest_failing": self.failed,
            "answer": self.answer(),
            "steps": [asdict(s) for s in self.steps],
        }


def level_status(contract: LoadedContract, summary: SweepSummary, level: int) -> tuple[Status, str]:
    """The capacity checks' verdict at one concurrency level of a summary."""
    from slabench.sla.estimates import levels_from_summary

    specs = capacity_checks(contract.contract.checks())
    found = [lv for lv in levels_from_summary(summary) if lv.level.concurrency == level]
    if not found:
        return Status.FAIL, f"no figures at concurrency {level}"
    verdict = grade_level(contract.contract, contract.replica, found[0], specs)
    bad = [c for c in verdict.checks if c.status is not Status.PASS]
    why = "; ".join(f"{c.check} {c.status}: {c.reason}" for c in bad) or "every capacity check passed"
    return verdict.status, why


def run_search(
    levels: Sequence[int],
    tolerance: int,
    contract: LoadedContract,
    run_level: Callable[[list[int]], SweepSummary],
    say: Callable[[str], None],
) -> Search:
    """Bisect between min(levels) and max(levels). `run_level(tested)` runs every level in `tested` not yet run
    (with the repeats) and returns the summary of all of them."""
    if not capacity_checks(contract.contract.checks()):
        raise UserError(
            f"{contract.path}: --search needs a latency ceiling or an error-rate ceiling in targets (the checks that "
            "bound how much load fits); this contract has none"
        )
    if tolerance < 1:
        raise UserError(f"--search-tolerance {tolerance}: must be at least 1 user")
    low, high = min(levels), max(levels)
    if low == high:
        raise UserError(f"--search needs a range: the config's levels {list(levels)} give one level; list two")
    search = Search(low, high, tolerance)
    while (level := search.next_level()) is not None:
        summary = run_level(sorted({s.level for s in search.steps} | {level}))
        status, why = level_status(contract, summary, level)
        search.record(level, status, why)
        say(f"search: concurrency {level}: {status} — {why}")
    say(f"search: {search.answer()}")
    return search


def write_search(search: Search, path: Path) -> None:
    path.write_text(json.dumps(search.to_dict(), indent=2) + "\n", encoding="utf-8")
