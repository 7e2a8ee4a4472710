"""Answer quality: parse a model's JSON grading answer and score it against the ground truth.

An answer that cannot be parsed, or breaks the schema, is a *quality* failure (``parse_ok=False`` with a reason),
never an exception: the request itself succeeded. Tolerated: surrounding whitespace, a Markdown code fence
(```` ```json ... ``` ````, also without its closing fence), and a leading ``<think>...</think>`` block that
reasoning models put in `content` when the server runs no reasoning parser. Everything else is strict: one JSON
object, exactly the task's keys, one entry per rubric item of the account, scores valid for each item's scale.

Metrics for one answer (`QualityResult`):
- item accuracy: items whose score equals the truth / items in the rubric (an unparseable answer gets 0 of n);
- auto-fail detection per auto-fail item: true/false positives and false negatives;
- pass/fail agreement and overall-score absolute error, with the answer's overall computed by the same scoring
  rule from its item scores (None when the answer does not parse).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from slabench.core.tokens import estimate_tokens
from slabench.workload.accounts import WorkloadSettings, load_settings
from slabench.workload.rubric import RUBRIC_BY_ID, RubricItem, Score, is_autofail, score_call
from slabench.workload.transcripts import GradingItem, evidence_line

_FENCE = re.compile(r"^```[A-Za-z]*[ \t]*\n?(.*?)\n?[ \t]*(?:```)?\s*$", re.DOTALL)
_THINK = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)
_KEYS = {
    "verbose": ({"items", "summary"}, {"id", "score", "quote", "rationale"}),
    "terse": ({"items"}, {"id", "score"}),
}


class AnswerError(ValueError):
    """The answer is not valid JSON in the task's schema; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class QualityResult:
    parse_ok: bool
    parse_error: str | None
    items_expected: int
    items_correct: int
    item_accuracy: float | None  # None only when the rubric is empty
    autofail_tp: int
    autofail_fp: int
    autofail_fn: int
    pass_agree: bool | None  # None when the answer does not parse or either side has no verdict
    score_abs_error: float | None

    def record_fields(self, task: str) -> dict[str, Any]:
        """The fields `RequestRecord` carries (its quality block), for `record.replace(**...)`."""
        d = asdict(self)
        d.pop("parse_error")
        return {"quality_task": task, **d}


def _strip(text: str) -> str:
    s = _THINK.sub("", text, count=1).strip()
    if s.startswith("```"):
        m = _FENCE.match(s)
        s = m.group(1).strip() if m else s
    return s


def _loads(s: str) -> object:
    if not s:
        raise AnswerError("empty answer")
    try:
        return json.loads(s)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":
            raise AnswerError(f"text after the JSON object (at char {e.pos})") from None
        if e.pos >= len(s.rstrip()) or e.msg.startswith("Unterminated string"):
            raise AnswerError(f"truncated JSON: it ends before the object closes ({e.msg} at char {e.pos})") from None
        raise AnswerError(f"invalid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None


def parse_answer(text: str, rubric_ids: Iterable[int], task: str | None = None) -> dict[int, Score]:
    """The answer's score per rubric item. `task` None accepts either task's shape. Raises AnswerError."""
    ids = list(rubric_ids)
    obj = _loads(_strip(text))
    if not isinstance(obj, dict):
        raise AnswerError(f"the answer must be a JSON object, not {type(obj).__name__}")
    if task is None:
        task = "verbose" if "summary" in obj or _has_evidence(obj.get("items")) else "terse"
    top_keys, item_keys = _KEYS[task]
    extra = set(obj) - top_keys
    if extra:
        raise AnswerError(f"unknown key {sorted(extra)[0]!r} (a {task} answer has {', '.join(sorted(top_keys))})")
    missing = top_keys - set(obj)
    if missing:
        raise AnswerError(f"missing key {sorted(missing)[0]!r}")
    if task == "verbose" and not isinstance(obj["summary"], str):
        raise AnswerError("summary must be a string")
    items = obj["items"]
    if not isinstance(items, list):
        raise AnswerError("items must be a list")
    allowed = set(ids)
    scores: dict[int, Score] = {}
    for n, entry in enumerate(items):
        where = f"items[{n}]"
        if not isinstance(entry, dict):
            raise AnswerError(f"{where} must be an object")
        if set(entry) != item_keys:
            bad = sorted(set(entry) - item_keys) or sorted(item_keys - set(entry))
            verb = "unknown" if set(entry) - item_keys else "missing"
            raise AnswerError(f"{where}: {verb} key {bad[0]!r} (a {task} item has {', '.join(sorted(item_keys))})")
        rid = entry["id"]
        if not isinstance(rid, int) or isinstance(rid, bool):
            raise AnswerError(f"{where}: id must be an integer (got {rid!r})")
        if rid not in allowed:
            raise AnswerError(f"{where}: item {rid} is not on this account's scorecard")
        if rid in scores:
            raise AnswerError(f"{where}: item {rid} is scored twice")
        item = RUBRIC_BY_ID[rid]
        value = entry["score"]
        if not item.allows(value):
            want = "an integer 1-5" if item.scale == "1-5" else " or ".join(f'"{v}"' for v in _labels(item))
            raise AnswerError(f"{where}: item {rid} score {value!r} is not allowed (use {want})")
        if task == "verbose":
            for k in ("quote", "rationale"):
                if not isinstance(entry[k], str):
                    raise AnswerError(f"{where}: {k} must be a string")
        scores[rid] = value
    if len(scores) != len(allowed):
        absent = [i for i in ids if i not in scores]
        raise AnswerError(f"items missing from the answer: {', '.join(map(str, absent))}")
    return scores


def _has_evidence(items: object) -> bool:
    return isinstance(items, list) and any(isinstance(e, dict) and ("quote" in e or "rationale" in e) for e in items)


def _labels(item: RubricItem) -> tuple[str, ...]:
    return ("Y", "N", "NA") if item.scale == "YNNA" else ("Y", "N")


def score_answer(
    text: str, item: GradingItem, task: str | None = None, settings: WorkloadSettings | None = None
) -> QualityResult:
    """Compare the answer `text` with `item`'s ground truth. Never raises for a bad answer."""
    settings = settings or load_settings()
    account = settings.account(item.account)
    truth = item.score_map
    rubric = account.items
    n = len(rubric)
    true_fail = {i.id for i in rubric if is_autofail(i, truth[i.id], account.recording_disclosure_required)}
    try:
        pred = parse_answer(text, account.rubric, task)
    except AnswerError as e:
        return QualityResult(False, str(e), n, 0, 0.0 if n else None, 0, 0, len(true_fail), None, None)
    correct = sum(1 for i in rubric if pred[i.id] == truth[i.id])
    pred_fail = {i.id for i in rubric if is_autofail(i, pred[i.id], account.recording_disclosure_required)}
    cs = score_call(rubric, pred, account.recording_disclosure_required, settings.pass_threshold)
    agree = None if cs.passed is None or item.passed is None else cs.passed == item.passed
    err = None if cs.overall is None or item.overall is None else abs(round(cs.overall, 2) - item.overall)
    return QualityResult(
        parse_ok=True,
        parse_error=None,
        items_expected=n,
        items_correct=correct,
        item_accuracy=correct / n if n else None,
        autofail_tp=len(pred_fail & true_fail),
        autofail_fp=len(pred_fail - true_fail),
        autofail_fn=len(true_fail - pred_fail),
        pass_agree=agree,
        score_abs_error=err,
    )


@dataclass(frozen=True, slots=True)
class QualitySummary:
    """Quality over many answers (one task). Ratios are None when their denominator is 0 ("no data")."""

    answers: int
    parse_ok_rate: float | None
    item_accuracy: float | None  # Σ correct / Σ expected, unparseable answers counting 0 correct
    item_accuracy_parsed: float | None  # the same over parsed answers only
    autofail_precision: float | None
    autofail_recall: float | None
    pass_agreement: float | None  # over answers with a verdict on both sides
    score_mae: float | None


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def summarize_quality(results: Iterable[QualityResult]) -> QualitySummary:
    rs = list(results)
    ok = [r for r in rs if r.parse_ok]
    tp = sum(r.autofail_tp for r in rs)
    fp = sum(r.autofail_fp for r in rs)
    fn = sum(r.autofail_fn for r in rs)
    agree = [r.pass_agree for r in rs if r.pass_agree is not None]
    errs = [r.score_abs_error for r in rs if r.score_abs_error is not None]
    return QualitySummary(
        answers=len(rs),
        parse_ok_rate=_ratio(len(ok), len(rs)),
        item_accuracy=_ratio(sum(r.items_correct for r in rs), sum(r.items_expected for r in rs)),
        item_accuracy_parsed=_ratio(sum(r.items_correct for r in ok), sum(r.items_expected for r in ok)),
        autofail_precision=_ratio(tp, tp + fp),
        autofail_recall=_ratio(tp, tp + fn),
        pass_agreement=_ratio(sum(agree), len(agree)),
        score_mae=_ratio(sum(errs), len(errs)),
    )


# ---- simulated answers (the simulator's grading mode) -------------------------------------------------------------

_RATIONALE_MORE = (
    "The rest of the call does not change this.",
    "Nothing later in the transcript contradicts it.",
    "This matches the anchor wording for the item.",
    "The caller's reaction in the next lines supports this reading.",
    "Other agent lines were checked for the same behaviour.",
    "The timing of the line in the call fits this too.",
    "No other evidence points the other way.",
    "Both the agent's words and the outcome agree.",
)


def _wrong(item: RubricItem, truth: Score, rng: random.Random) -> Score:
    """A plausible mistake: Y/N flipped, NA confused with N, a 1-5 score one step off."""
    if item.scale == "1-5":
        t = int(truth)
        step = 1 if t == 1 else -1 if t == 5 else rng.choice((-1, 1))
        return t + step
    if item.scale == "YN":
        return "N" if truth == "Y" else "Y"
    if truth == "NA":
        return "N" if rng.random() < 0.7 else "Y"
    other = "N" if truth == "Y" else "Y"
    return other if rng.random() < 0.8 else "NA"


def _anchor(item: RubricItem, score: Score) -> str:
    label = str(score)
    return next((text for lab, text in item.anchors if lab == label), "")


def _pad(base: str, target: int, rng: random.Random) -> str:
    """Add neutral sentences (each at most once per cycle) until `base` reaches about `target` estimator tokens."""
    out, n = base, estimate_tokens(base)
    left: list[str] = []
    while True:
        if not left:
            left = rng.sample(_RATIONALE_MORE, len(_RATIONALE_MORE))
        more = left.pop()
        k = estimate_tokens(more)
        if n + k / 2 > target:  # stop at whichever side of the target is closer
            return out
        out, n = f"{out} {more}", n + k


def simulated_answer(
    item: GradingItem,
    accuracy: float,
    rng: random.Random,
    task: str = "verbose",
    settings: WorkloadSettings | None = None,
) -> str:
    """A schema-valid JSON answer whose item scores are right with probability `accuracy` each (otherwise a
    plausible mistake), about `item.output_tokens(task)` tokens long, so a simulator can stream a realistic answer
    and the quality path can be checked end to end."""
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"accuracy must be in [0, 1] (got {accuracy})")
    settings = settings or load_settings()
    account = settings.account(item.account)
    rubric = {i.id: i for i in account.items}
    scores = [(rid, s if rng.random() < accuracy else _wrong(rubric[rid], s, rng)) for rid, s in item.scores]
    if task == "terse":
        return json.dumps({"items": [{"id": rid, "score": s} for rid, s in scores]})
    if task != "verbose":
        raise ValueError(f"unknown task {task!r}")
    per_item: list[float] = list(item.item_output_tokens) or [settings.output.per_item_median] * len(scores)
    budget = item.verbose_tokens - settings.output.base_tokens
    scale = min(1.0, budget / sum(per_item)) if sum(per_item) else 1.0
    entries = []
    for (rid, s), want in zip(scores, per_item, strict=True):
        ri = rubric[rid]
        words = [] if s == "NA" else (evidence_line(item, rid) or "").split()[:25]
        why = f"Scored {s}: {_anchor(ri, s)}."
        while True:  # shorten the quote until the entry fits its share of the answer (or the quote is short)
            quote = " ".join(words)
            shell = estimate_tokens(json.dumps({"id": rid, "score": s, "quote": quote, "rationale": why}))
            if shell <= want * scale or len(words) <= 6:
                break
            words = words[: max(6, len(words) - 4)]
        why = _pad(why, estimate_tokens(why) + round(want * scale) - shell, rng)
        entries.append({"id": rid, "score": s, "quote": quote, "rationale": why})
    body = json.dumps({"items": entries, "summary": ""})
    summary = _pad(
        f"Graded {len(entries)} items for {account.name}.",
        item.verbose_tokens - estimate_tokens(body) - 1,
        rng,
    )
    return json.dumps({"items": entries, "summary": summary})
