"""Builders shared by the SLA tests: contracts, estimates, levels and records with exact, hand-checkable numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slabench.commands import cli
from slabench.core.record import ErrorCategory, Outcome, RequestRecord
from slabench.sla.contract import Contract
from slabench.sla.cost import ReplicaPrice, replica_price
from slabench.sla.estimates import Estimate, Level, LevelEstimates
from slabench.sla.prices import load_prices

BASE: dict[str, Any] = {
    "name": "test",
    "load": {"concurrency": 16},
    "deployment": {"instance_type": "g6e.xlarge"},
}


def contract(**fields: Any) -> Contract:
    return Contract.model_validate({**BASE, **fields})


def replica(instance_type: str = "g6e.xlarge", replicas: int = 1, **kw: Any) -> ReplicaPrice:
    return replica_price(instance_type, replicas, load_prices(), "us-east-1", **kw)


def est(mean: float | None, half: float | None = None, n: int | None = None, samples: int = 500, **kw: Any) -> Estimate:
    """An estimate with a symmetric 95% CI of half-width `half` over n runs (default 3); without `half`, a single
    run (n = 1) or, with `n`, repeats whose summary has no interval."""
    if half is None:
        return Estimate(mean, n=n or 1, samples=samples, **kw)
    return Estimate(mean, half / 2, n or 3, mean - half, mean + half, samples=samples, **kw)  # type: ignore[operator]


def level(concurrency: int | None = 16, **metrics: Estimate) -> LevelEstimates:
    lv = Level(concurrency=concurrency) if concurrency is not None else Level()
    return LevelEstimates(lv, {k.replace("__", "."): v for k, v in metrics.items()})


def write(tmp_path: Path, text: str, name: str = "sla.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


_CATEGORY = {Outcome.ERROR: ErrorCategory.HTTP_5XX, Outcome.INCOMPLETE: ErrorCategory.STREAM_CUT,
             Outcome.DROPPED: ErrorCategory.CANCELLED}  # fmt: skip


def record(
    i: int,
    *,
    sent: float = 0.0,
    ttft: float = 0.1,
    gaps: tuple[float, ...] = (0.01, 0.01, 0.01),
    prompt_tokens: int = 100,
    outcome: Outcome = Outcome.OK,
    stage_level: int | None = None,
    stage_phase: str | None = None,
    stage_repeat: int | None = None,
    wall: float | None = 1_700_000_000.0,
    **quality: Any,
) -> RequestRecord:
    """One request: first token `ttft` after `sent`, then one token per gap; ends at the last token."""
    first = sent + ttft
    times = [first]
    for g in gaps:
        times.append(times[-1] + g)
    ok = outcome is Outcome.OK
    return RequestRecord(
        run_id="r",
        request_id=f"q{i}",
        wall_sent=None if wall is None else wall + sent,
        sent=sent,
        first_byte=first if ok else None,
        first_token=first if ok else None,
        last_token=times[-1] if ok else None,
        end=times[-1],
        chunk_times=tuple(times) if ok else (),
        prompt_tokens=prompt_tokens,
        completion_tokens=len(times) if ok else None,
        token_source="server",
        outcome=outcome,
        error_category=None if ok else _CATEGORY[outcome],
        stage_level=stage_level,
        stage_phase=stage_phase,
        stage_repeat=stage_repeat,
        **quality,
    )


def slabench_cli(monkeypatch: Any) -> Any:
    """`slabench` main with the `grade` command registered (until the lead wires it into slabench/commands/cli.py)."""
    if "grade" not in cli.COMMANDS:
        monkeypatch.setitem(cli.COMMANDS, "grade", "slabench.commands.grade")
    return cli.main
