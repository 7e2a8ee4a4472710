"""The 250 golden calls: built from the dataset seed, stored as JSONL with their ground truth, and checked on load.

A row is one call (`GradingItem` fields; the transcript last, for readability). Loading re-derives everything that
can be derived — the overall score, pass verdict and auto-fail flags from the item scores by the scoring rule, the
transcript's token count — so a hand-edited score or transcript is caught with its file, line and field.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Annotated

from pydantic import Field, StrictBool, StrictInt, StrictStr

from slabench.core.config import StrictModel, validate_data
from slabench.core.errors import UserError
from slabench.core.tokens import estimate_tokens
from slabench.workload.accounts import INTENTS, WorkloadSettings
from slabench.workload.queue import SEED_BITS, derive_seed
from slabench.workload.rubric import RUBRIC_BY_ID, SCALE_LABEL, score_call
from slabench.workload.transcripts import GradingItem, generate_call

GoldenCall = GradingItem  # golden calls and queue items are the same type


def build_golden(settings: WorkloadSettings, seed: int, taken: set[int] | None = None) -> list[GradingItem]:
    """The golden calls: each account's `golden` count, ids ``golden-<account>-<nnn>``. `taken` gains their seeds."""
    rng = random.Random(derive_seed(seed, "golden/seeds"))
    taken = set() if taken is None else taken
    calls = []
    for key, acct in settings.accounts.items():
        for k in range(1, acct.golden + 1):
            s = rng.getrandbits(SEED_BITS)
            while s in taken:
                s = rng.getrandbits(SEED_BITS)
            taken.add(s)
            calls.append(generate_call(settings, key, s, f"golden-{key}-{k:03d}"))
    return calls


def golden_row(c: GradingItem) -> str:
    """One JSONL line (no newline). Key order is fixed, so the bytes are deterministic."""
    row = {
        "id": c.item_id,
        "account": c.account,
        "seed": c.seed,
        "intent": c.intent,
        "minutes": c.minutes,
        "overall": c.overall,
        "passed": c.passed,
        "autofail": list(c.autofail),
        "scores": {str(i): s for i, s in c.scores},
        "evidence": {str(i): line for i, line in c.evidence},
        "item_output_tokens": list(c.item_output_tokens),
        "verbose_tokens": c.verbose_tokens,
        "terse_tokens": c.terse_tokens,
        "transcript_tokens": c.transcript_tokens,
        "transcript": c.transcript,
    }
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))


class GoldenRow(StrictModel):
    id: Annotated[str, Field(min_length=1)]
    account: StrictStr
    seed: Annotated[StrictInt, Field(ge=0)]
    intent: StrictStr
    minutes: Annotated[float, Field(gt=0)]
    overall: Annotated[float, Field(ge=0, le=100)] | None
    passed: StrictBool | None
    autofail: list[StrictInt]
    scores: dict[int, StrictStr | StrictInt]
    evidence: dict[int, Annotated[StrictInt, Field(ge=0)]]
    item_output_tokens: list[Annotated[StrictInt, Field(ge=0)]]
    verbose_tokens: Annotated[StrictInt, Field(ge=0)]
    terse_tokens: Annotated[StrictInt, Field(ge=0)]
    transcript_tokens: Annotated[StrictInt, Field(ge=0)]
    transcript: Annotated[str, Field(min_length=1)]


def _check_row(r: GoldenRow, settings: WorkloadSettings, where: str) -> GradingItem:
    """Cross-field checks; each failure names the field."""
    acct = settings.account(r.account, f"{where}: account")
    if r.intent not in INTENTS:
        raise UserError(f"{where}: intent: unknown intent {r.intent!r} (known: {', '.join(INTENTS)})")
    for rid, value in r.scores.items():
        if rid not in RUBRIC_BY_ID:
            raise UserError(f"{where}: scores.{rid}: unknown rubric item {rid} (items are 1–{len(RUBRIC_BY_ID)})")
        if rid not in acct.rubric:
            raise UserError(f"{where}: scores.{rid}: item {rid} is not on account {r.account}'s scorecard")
        item = RUBRIC_BY_ID[rid]
        if not item.allows(value):
            raise UserError(
                f"{where}: scores.{rid}: {value!r} is not a valid score for item {rid} ({SCALE_LABEL[item.scale]})"
            )
    missing = [i for i in acct.rubric if i not in r.scores]
    if missing:
        raise UserError(f"{where}: scores: items {', '.join(map(str, missing))} of account {r.account} are missing")
    cs = score_call(acct.items, r.scores, acct.recording_disclosure_required, settings.pass_threshold)
    overall = None if cs.overall is None else round(cs.overall, 2)
    stated = r.overall
    if (overall is None) != (stated is None) or (
        overall is not None and stated is not None and abs(overall - stated) > 0.005
    ):
        raise UserError(
            f"{where}: overall: {r.overall} does not follow from the scores by the scoring rule ({overall})"
        )
    if tuple(r.autofail) != cs.autofail:
        raise UserError(f"{where}: autofail: {r.autofail} does not follow from the scores ({list(cs.autofail)})")
    if r.passed != cs.passed:
        raise UserError(f"{where}: passed: {r.passed} does not follow from the scores ({cs.passed})")
    n_lines = r.transcript.count("\n") + 1
    for rid, line in r.evidence.items():
        if rid not in acct.rubric or line >= n_lines:
            raise UserError(f"{where}: evidence.{rid}: no such rubric item or transcript line ({line})")
    if len(r.item_output_tokens) != len(acct.rubric):
        raise UserError(f"{where}: item_output_tokens: needs one entry per rubric item ({len(acct.rubric)})")
    n = estimate_tokens(r.transcript)
    if n != r.transcript_tokens:
        raise UserError(
            f"{where}: transcript: has {n} tokens but transcript_tokens says {r.transcript_tokens} "
            "(the transcript was edited; rebuild with `slabench dataset build`)"
        )
    return GradingItem(
        item_id=r.id,
        account=r.account,
        seed=r.seed,
        intent=r.intent,
        minutes=r.minutes,
        transcript=r.transcript,
        transcript_tokens=r.transcript_tokens,
        scores=tuple((i, r.scores[i]) for i in acct.rubric),
        autofail=tuple(r.autofail),
        overall=r.overall,
        passed=r.passed,
        evidence=tuple(sorted(r.evidence.items())),
        item_output_tokens=tuple(r.item_output_tokens),
        verbose_tokens=r.verbose_tokens,
        terse_tokens=r.terse_tokens,
    )


def parse_golden(path: Path, text: str, settings: WorkloadSettings) -> list[GradingItem]:
    """Validate and load golden JSONL text; the first bad row raises UserError naming ``file:line: field``."""
    calls: list[GradingItem] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as e:
            raise UserError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(data, dict):
            raise UserError(f"{where}: a row must be a JSON object")
        row = validate_data(data, GoldenRow, where)
        if row.id in seen:
            raise UserError(f"{where}: id: {row.id!r} repeats line {seen[row.id]}")
        seen[row.id] = lineno
        calls.append(_check_row(row, settings, where))
    if not calls:
        raise UserError(f"{path}: no golden calls in the file")
    return calls


def golden_counts(settings: WorkloadSettings) -> dict[str, int]:
    return {k: a.golden for k, a in settings.accounts.items()}


__all__ = ["GoldenCall", "build_golden", "golden_counts", "golden_row", "parse_golden"]
