"""Hand-made records and sweep trees for the analysis tests (imported explicitly, not a conftest)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable
from pathlib import Path

from slabench.core.record import ErrorCategory, Outcome, RequestRecord
from slabench.core.schema import SWEEP_RUN

WALL0 = 1_700_000_000.0
_SEQ = itertools.count()


def rec(
    sent: float,
    ttft: float | None = 0.1,
    gaps: Iterable[float] = (0.01, 0.01),
    tokens: Iterable[int] | None = None,
    outcome: Outcome = Outcome.OK,
    category: ErrorCategory | None = None,
    prompt_tokens: int = 100,
    completion_tokens: int | None = None,
    tail: float = 0.0,
    run_id: str = "r",
    **kw,
) -> RequestRecord:
    """One record sent at monotonic `sent` (wall clock WALL0 + sent): first token after `ttft`, then chunks after
    each of `gaps`; end = last token + `tail`. completion_tokens defaults to Σ tokens per chunk (1 each)."""
    gaps = list(gaps)
    chunk_tokens = tuple(tokens) if tokens is not None else None
    if ttft is None:
        times: tuple[float, ...] = ()
    else:
        t = [sent + ttft]
        for g in gaps:
            t.append(t[-1] + g)
        times = tuple(t)
    if completion_tokens is None and times:
        completion_tokens = sum(chunk_tokens) if chunk_tokens else len(times)
    end = (times[-1] if times else sent + 0.05) + tail
    return RequestRecord(
        run_id=run_id,
        request_id=f"{run_id}-{sent}-{next(_SEQ)}",  # unique: a records file holds each request once
        wall_sent=WALL0 + sent,
        sent=sent,
        first_byte=sent + (ttft or 0.0) / 2,
        first_token=times[0] if times else None,
        last_token=times[-1] if times else None,
        end=end,
        chunk_times=times,
        chunk_tokens=chunk_tokens,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        token_source="server",
        outcome=outcome,
        error_category=category,
        **kw,
    )


def write_run(
    root: Path, level: int, repeat: int, records: list[RequestRecord], warmup_s: float = 0.0, status: str = "complete"
) -> Path:
    d = root / str(level) / str(repeat)
    d.mkdir(parents=True, exist_ok=True)
    with (d / "records.jsonl").open("w") as f:
        for r in records:
            f.write(json.dumps(r.to_dict()) + "\n")
    manifest = {**SWEEP_RUN.stamp(), "status": status, "warmup_s": warmup_s, "run_id": f"L{level}-r{repeat}"}
    manifest["level"] = level
    (d / "manifest.json").write_text(json.dumps(manifest))
    return d
