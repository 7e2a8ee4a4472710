"""Grading prompts: per-account prefix identical across items (prefix caching), transcript last, counted right."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest

from slabench.core.errors import UserError
from slabench.core.tokens import estimate_tokens
from slabench.workload.accounts import load_settings
from slabench.workload.prompts import answer_schema, build_messages, prompt_tokens, system_prompt
from slabench.workload.quality import simulated_answer
from tests.helpers.workload_support import sample_calls


@pytest.mark.parametrize("task", ["verbose", "terse"])
def test_system_prompt_is_byte_identical_per_account(task):
    by_account: dict[str, set[str]] = {}
    for c in sample_calls():
        msgs = build_messages(c, task)
        assert [m["role"] for m in msgs] == ["system", "user"]
        by_account.setdefault(c.account, set()).add(msgs[0]["content"])
    assert all(len(v) == 1 for v in by_account.values())
    assert len({next(iter(v)) for v in by_account.values()}) == len(by_account)  # but differs between accounts


def test_system_prompt_contents():
    s = load_settings()
    for key, acct in s.accounts.items():
        text = system_prompt(key, "verbose")
        for item in acct.items:
            assert f"[{item.id}] {item.name}" in text
            for label, anchor in item.anchors:
                assert f"    {label}: {anchor}" in text
        assert f"Scorecard ({len(acct.rubric)} items" in text
        assert "Overall = 100 x sum(weight x value) / sum(weight)" in text and "passes at 85" in text
        assert "Evidence rules" in text and '"quote"' in text
        assert f"{acct.name} policy reference" in text
        assert str(acct.policy.return_days) in text or acct.vertical == "card"
        terse = system_prompt(key, "terse")
        assert '{"items": [{"id": <item number>, "score": <score>}, ...]}' in terse and '"quote"' not in terse
        # both tasks share everything up to the evidence rules: one more cacheable prefix
        assert text.split("Evidence rules")[0] == terse.split("Evidence rules")[0]
    assert "AUTO-FAIL if N" in system_prompt("F").split("[2] Recording disclosure")[1].split("\n")[0]
    assert "AUTO-FAIL" not in system_prompt("A").split("[2] Recording disclosure")[1].split("\n")[0]


def test_transcript_comes_last_in_the_user_message():
    c = sample_calls()[0]
    user = build_messages(c)[1]["content"]
    assert user.endswith(c.transcript) and user.index(c.transcript) < 40


def test_prompt_tokens_match_what_the_simulator_counts():
    for c in sample_calls()[::7]:
        for task in ("verbose", "terse"):
            msgs = build_messages(c, task)
            assert prompt_tokens(c, task) == estimate_tokens("\n".join(m["content"] for m in msgs))


def test_fixed_prefix_is_near_the_workload_md_size():
    """docs/workload.md: the fixed per-account prefix is roughly 350 + 55 × items + 150 tokens."""
    s = load_settings()
    for key, acct in s.accounts.items():
        spec = 350 + 55 * len(acct.rubric) + 150
        assert 0.85 * spec <= estimate_tokens(system_prompt(key)) <= 1.2 * spec, key


@pytest.mark.parametrize("task", ["verbose", "terse"])
def test_answer_schema_accepts_simulated_answers_and_rejects_bad_ones(task):
    rng = random.Random(3)
    validators = {}
    for c in sample_calls()[::20]:
        if c.account not in validators:
            schema = answer_schema(c.account, task)
            jsonschema.Draft202012Validator.check_schema(schema)
            validators[c.account] = jsonschema.Draft202012Validator(schema)
        v = validators[c.account]
        ans = json.loads(simulated_answer(c, 0.7, rng, task))
        v.validate(ans)
        wrong_score = json.loads(json.dumps(ans))
        wrong_score["items"][0]["score"] = 7
        short = json.loads(json.dumps(ans))
        short["items"].pop()
        assert not v.is_valid(wrong_score) and not v.is_valid(short)
    assert len(validators) == 6


def test_unknown_task_or_account_is_a_user_error():
    c = sample_calls()[0]
    with pytest.raises(UserError, match="unknown grading task 'short'"):
        build_messages(c, "short")
    with pytest.raises(UserError, match="unknown account 'Q'"):
        system_prompt("Q")
