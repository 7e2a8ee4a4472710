"""Grading prompts: a per-account system prompt, then the transcript last in the user message.

The system prompt holds the role, the account's rubric with scale anchors, the scoring rule, the evidence rules,
the account's policy reference and a strict JSON output schema. It depends only on (settings, account, task), so
every item of an account sends a byte-identical prefix: what vLLM's prefix cache can reuse.

Two tasks:
- ``verbose``: per item ``{"id", "score", "quote", "rationale"}`` plus a one-sentence ``summary`` (~55 tokens/item);
- ``terse``: per item ``{"id", "score"}`` only (~10 tokens/item).
"""

from __future__ import annotations

import functools
import json
from typing import Any, Literal

from slabench.core.errors import UserError
from slabench.core.tokens import estimate_tokens
from slabench.workload import phrases as P
from slabench.workload.accounts import Account, WorkloadSettings, load_settings
from slabench.workload.rubric import SCALE_LABEL, RubricItem
from slabench.workload.transcripts import GradingItem

Task = Literal["verbose", "terse"]
TASKS: tuple[Task, ...] = ("verbose", "terse")

_ROLE = """You are a quality-assurance analyst for {brand}'s customer-service team. You grade one recorded call \
against the scorecard below, item by item, the way a trained human QA reviewer would.

How to grade:
- Read the whole transcript before scoring anything. The transcript is your only evidence; do not assume anything \
that is not in it.
- Grade the agent, not the customer. IVR lines are the automated phone system; Specialist lines are a colleague \
who joined after a transfer. Lines in parentheses are events (holds, keypad entry, transfers).
- Judge what the agent actually said, not what they probably meant. A required behaviour you cannot find did not \
happen.
- Use NA only where the item's NA anchor describes the call (no hold happened, so hold etiquette is NA). A missing \
behaviour is N, never NA.
- For 1-5 items, pick the anchor that best matches the call as a whole; between two anchors, choose the lower one.
- Check every policy statement against the policy reference; a confident statement that contradicts it is worse \
than a vague one.
- Auto-fail items are critical compliance checks: score them strictly on the evidence, without benefit of the \
doubt."""

_RULE = """Scoring rule (the harness applies it to your item scores; it tells you what matters most):
Y = 1, N = 0, NA is left out, and a 1-5 score x counts as (x - 1) / 4. Overall = 100 x sum(weight x value) / \
sum(weight) over the items that are not NA. A failed auto-fail item sets the overall score to 0 and flags the \
call. A call passes at {threshold:g} or more."""

_EVIDENCE = {
    "verbose": """Evidence rules:
- quote: copy the agent's words exactly from the one transcript line that best shows the behaviour, at most 25 \
words, without the timestamp or speaker label. If the behaviour is missing or the item is NA, use "".
- rationale: one or two sentences naming the anchor the evidence matches and why.
- Never invent or paraphrase a quote: it must appear in the transcript word for word.""",
    "terse": """Evidence rules:
- Base every score on lines in the transcript, as a reviewer who must defend it would.
- This task returns scores only: no quotes, no rationale, no summary.""",
}

_OUTPUT = {
    "verbose": """Output format: reply with one JSON object and nothing else (no prose, no markdown, no code fences):
{{"items": [{{"id": <item number>, "score": <score>, "quote": "<exact words>", "rationale": "<why>"}}, ...], \
"summary": "<one sentence on the call>"}}
- "items" has exactly one entry per scorecard item ({ids}), in scorecard order.
- "score" is the string "Y", "N" or "NA" for Y/N and Y/N/NA items, and an integer from 1 to 5 for 1-5 items.
- No other keys anywhere.""",
    "terse": """Output format: reply with one JSON object and nothing else (no prose, no markdown, no code fences):
{{"items": [{{"id": <item number>, "score": <score>}}, ...]}}
- "items" has exactly one entry per scorecard item ({ids}), in scorecard order.
- "score" is the string "Y", "N" or "NA" for Y/N and Y/N/NA items, and an integer from 1 to 5 for 1-5 items.
- No other keys anywhere.""",
}

USER_PREFIX = "Grade this call.\n\nTranscript:\n"


def _rubric_block(account: Account) -> str:
    lines = [f"Scorecard ({len(account.items)} items, total weight {sum(i.weight for i in account.items)}):"]
    for item in account.items:
        lines.append(
            f"[{item.id}] {item.name} ({SCALE_LABEL[item.scale]}, weight {item.weight}{_autofail(item, account)})"
        )
        lines.extend(f"    {label}: {text}" for label, text in item.anchors)
    return "\n".join(lines)


def _autofail(item: RubricItem, account: Account) -> str:
    if item.autofail == "N" or (item.autofail == "N_required" and account.recording_disclosure_required):
        return ", AUTO-FAIL if N"
    if item.autofail == "1":
        return ", AUTO-FAIL if 1"
    return ""


def _policy_block(account: Account) -> str:
    topics: list[str] = []
    for intent in account.intents:
        t = P.INTENTS[intent].topic
        t = "credit" if account.vertical == "card" and t == "subscription" else t
        if t not in topics:
            topics.append(t)
    facts = {k: str(v) for k, v in account.policy.model_dump().items() if v is not None}
    return f"{account.name} policy reference:\n" + "\n".join(
        "- " + P.POLICY_REFERENCE[t].format_map(facts) for t in topics
    )


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise UserError(f"task: unknown grading task {task!r} (use one of: {', '.join(TASKS)})")


class _Same:
    """Hash an (immutable) settings object by identity, so prompts can be cached per settings object."""

    __slots__ = ("obj",)

    def __init__(self, obj: WorkloadSettings) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj


@functools.lru_cache(maxsize=128)
def _system(ref: _Same, account_key: str, task: str) -> tuple[str, int]:
    settings = ref.obj
    account = settings.account(account_key)
    ids = ", ".join(str(i) for i in account.rubric)
    text = "\n\n".join(
        (
            _ROLE.format(brand=account.name),
            _rubric_block(account),
            _RULE.format(threshold=settings.pass_threshold),
            _EVIDENCE[task],
            _policy_block(account),
            _OUTPUT[task].format(ids=ids),
        )
    )
    return text, estimate_tokens(text)


def system_prompt(account: str, task: Task = "verbose", settings: WorkloadSettings | None = None) -> str:
    """The account's system prompt for a task: the same bytes for every call of that account."""
    _check_task(task)
    return _system(_Same(settings or load_settings()), account, task)[0]


def build_messages(
    item: GradingItem, task: Task = "verbose", settings: WorkloadSettings | None = None
) -> list[dict[str, str]]:
    """OpenAI chat messages for grading `item`: the account's system prompt, then the transcript last."""
    _check_task(task)
    system, _ = _system(_Same(settings or load_settings()), item.account, task)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": USER_PREFIX + item.transcript},
    ]


_USER_PREFIX_TOKENS = estimate_tokens(USER_PREFIX)


def prompt_tokens(item: GradingItem, task: Task = "verbose", settings: WorkloadSettings | None = None) -> int:
    """`estimate_tokens` summed over `build_messages(item, task)`'s contents (what the simulator counts), without
    building the strings: the system prompt's count is cached and the transcript's is stored on the item."""
    _check_task(task)
    _, system_tokens = _system(_Same(settings or load_settings()), item.account, task)
    return system_tokens + _USER_PREFIX_TOKENS + item.transcript_tokens


def answer_schema(account: str, task: Task = "verbose", settings: WorkloadSettings | None = None) -> dict[str, Any]:
    """JSON Schema of a valid answer, items in scorecard order, for guided decoding (`response_format` /
    `guided_json`). `quality.parse_answer` accepts every answer this schema accepts (and also any item order)."""
    _check_task(task)
    acct = (settings or load_settings()).account(account)
    entries = []
    for item in acct.items:
        props: dict[str, Any] = {"id": {"const": item.id}, "score": _score_schema(item)}
        if task == "verbose":
            props |= {"quote": {"type": "string"}, "rationale": {"type": "string"}}
        entries.append({"type": "object", "properties": props, "required": list(props), "additionalProperties": False})
    top: dict[str, Any] = {
        "items": {"type": "array", "prefixItems": entries, "items": False, "minItems": len(entries)},
    }
    if task == "verbose":
        top["summary"] = {"type": "string"}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": top,
        "required": list(top),
        "additionalProperties": False,
    }


def _score_schema(item: RubricItem) -> dict[str, Any]:
    if item.scale == "1-5":
        return {"type": "integer", "minimum": 1, "maximum": 5}
    return {"enum": ["Y", "N", "NA"] if item.scale == "YNNA" else ["Y", "N"]}


def example_answer(item: GradingItem, task: Task = "verbose") -> str:
    """The ground truth written as an answer (terse: exact; verbose: empty quotes and rationales)."""
    _check_task(task)
    if task == "terse":
        return json.dumps({"items": [{"id": i, "score": s} for i, s in item.scores]})
    return json.dumps(
        {"items": [{"id": i, "score": s, "quote": "", "rationale": ""} for i, s in item.scores], "summary": ""}
    )
