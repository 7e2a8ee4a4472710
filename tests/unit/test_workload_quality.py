"""Answer parsing and quality scoring: malformed, truncated, fenced and schema-violating answers are quality
failures with a reason, never exceptions; metrics follow the ground truth."""

from __future__ import annotations

import dataclasses
import json
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slabench.core.record import RequestRecord
from slabench.core.tokens import estimate_tokens
from slabench.workload.accounts import load_settings
from slabench.workload.prompts import example_answer
from slabench.workload.quality import (
    AnswerError,
    parse_answer,
    score_answer,
    simulated_answer,
    summarize_quality,
)
from slabench.workload.transcripts import generate_call
from tests.helpers.workload_support import sample_calls

S = load_settings()


def _call_with(predicate, account="F"):
    return next(c for seed in range(1, 5000) if predicate(c := generate_call(S, account, seed, f"q-{seed}")))


CALL = _call_with(lambda c: not c.autofail and c.passed)  # a clean, passing card call (26 items)
FAILING = _call_with(lambda c: len(c.autofail) == 1)


def _answer(call, overrides=None, task="terse"):
    items = [{"id": i, "score": (overrides or {}).get(i, s)} for i, s in call.scores]
    if task == "verbose":
        items = [{**e, "quote": "", "rationale": "ok"} for e in items]
        return json.dumps({"items": items, "summary": "fine"})
    return json.dumps({"items": items})


def test_perfect_answer():
    r = score_answer(example_answer(CALL, "terse"), CALL, "terse")
    assert r.parse_ok and r.parse_error is None
    assert (r.items_expected, r.items_correct, r.item_accuracy) == (26, 26, 1.0)
    assert (r.autofail_tp, r.autofail_fp, r.autofail_fn, r.pass_agree, r.score_abs_error) == (0, 0, 0, True, 0.0)
    assert score_answer(example_answer(CALL, "verbose"), CALL).item_accuracy == 1.0


def test_one_wrong_item_and_the_overall_error():
    scale_item = next(i for i, s in CALL.scores if isinstance(s, int) and s >= 2)
    truth = CALL.score_map[scale_item]
    r = score_answer(_answer(CALL, {scale_item: truth - 1}), CALL)
    assert (r.items_correct, r.item_accuracy) == (25, pytest.approx(25 / 26))
    acct = S.accounts["F"]
    weight = next(i.weight for i in acct.items if i.id == scale_item)
    den = sum(i.weight for i in acct.items if CALL.score_map[i.id] != "NA")
    assert r.score_abs_error == pytest.approx(100 * weight * 0.25 / den, abs=0.011)


def test_autofail_detection_counts():
    (af,) = FAILING.autofail
    missed = score_answer(_answer(FAILING, {af: "Y" if af != 10 else 3}), FAILING)
    assert (missed.autofail_tp, missed.autofail_fp, missed.autofail_fn) == (0, 0, 1)
    assert missed.score_abs_error > 0  # truth is 0 (auto-fail); the answer scored the call normally
    found = score_answer(example_answer(FAILING, "terse"), FAILING)
    assert (found.autofail_tp, found.autofail_fp, found.autofail_fn, found.pass_agree) == (1, 0, 0, True)
    false_alarm = score_answer(_answer(CALL, {4: "N"}), CALL)
    assert (false_alarm.autofail_tp, false_alarm.autofail_fp, false_alarm.pass_agree) == (0, 1, False)
    assert false_alarm.score_abs_error == pytest.approx(CALL.overall)


@pytest.mark.parametrize(
    "wrap",
    [
        lambda s: f"```json\n{s}\n```",
        lambda s: f"```\n{s}\n```\n",
        lambda s: f"  \n```JSON\n{s}",  # a fence that never closes
        lambda s: f"<think>The caller was verified first, so...</think>\n{s}",
        lambda s: f"<think>hmm</think>```json\n{s}\n```",
        lambda s: "\n\n" + s + "\n",
    ],
)
def test_tolerated_wrappers(wrap):
    r = score_answer(wrap(example_answer(CALL, "verbose")), CALL, "verbose")
    assert r.parse_ok, r.parse_error
    assert r.item_accuracy == 1.0


def _bad(call, mutate, task="terse"):
    obj = json.loads(_answer(call, task=task))
    mutate(obj)
    return json.dumps(obj)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty answer"),
        ("I think the agent did well overall.", "invalid JSON"),
        ('{"items": [{"id": 1, "score": "Y"},', "truncated JSON"),
        ('{"items": [{"id": 1, "score": "Y', "truncated JSON"),
        ("[1, 2, 3]", "must be a JSON object"),
        ('{"items": []} and some notes', "text after the JSON object"),
        ('Here you go: {"items": []}', "invalid JSON"),
        ("{'items': []}", "invalid JSON"),
    ],
)
def test_malformed_answers(text, reason):
    r = score_answer(text, CALL)
    assert not r.parse_ok and reason in r.parse_error
    assert (r.items_correct, r.item_accuracy, r.pass_agree, r.score_abs_error) == (0, 0.0, None, None)
    assert r.items_expected == 26


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda o: o["items"].pop(), "items missing from the answer: 26"),
        (lambda o: o["items"].append({"id": 1, "score": "Y"}), "item 1 is scored twice"),
        (lambda o: o["items"].append({"id": 99, "score": "Y"}), "item 99 is not on this account's scorecard"),
        (lambda o: o["items"][0].update(score="yes"), "score 'yes' is not allowed"),
        (lambda o: o["items"][5].update(score="Y"), "item 6 score 'Y' is not allowed (use an integer 1-5)"),
        (lambda o: o["items"][5].update(score="4"), "score '4' is not allowed"),
        (lambda o: o["items"][5].update(score=True), "score True is not allowed"),
        (lambda o: o["items"][0].update(score="NA"), "item 1 score 'NA' is not allowed"),
        (lambda o: o["items"][0].update(id="1"), "id must be an integer"),
        (lambda o: o["items"][0].update(confidence=0.9), "unknown key 'confidence'"),
        (lambda o: o["items"][0].pop("score"), "missing key 'score'"),
        (lambda o: o.update(overall=90), "unknown key 'overall'"),
        (lambda o: o.update(items={"1": "Y"}), "items must be a list"),
        (lambda o: o.pop("items"), "missing key 'items'"),
    ],
)
def test_schema_violations(mutate, reason):
    text = _bad(CALL, mutate)
    r = score_answer(text, CALL, "terse")
    assert not r.parse_ok and reason in r.parse_error, r.parse_error


def test_task_shapes_are_strict_when_the_task_is_given():
    verbose = _answer(CALL, task="verbose")
    assert "unknown key 'summary'" in score_answer(verbose, CALL, "terse").parse_error
    assert "missing key 'summary'" in score_answer(_answer(CALL), CALL, "verbose").parse_error
    no_quote = _bad(CALL, lambda o: o["items"][2].pop("quote"), "verbose")
    assert "missing key 'quote'" in score_answer(no_quote, CALL, "verbose").parse_error
    # without a task either shape is accepted
    assert score_answer(verbose, CALL).parse_ok and score_answer(_answer(CALL), CALL).parse_ok
    with pytest.raises(AnswerError):
        parse_answer('{"items": [], "summary": 3}', [1], "verbose")


@settings(max_examples=150, deadline=None)
@given(cut=st.integers(min_value=0))
def test_any_truncation_is_a_quality_failure_not_an_exception(cut):
    full = simulated_answer(CALL, 0.8, random.Random(1), "verbose")
    text = full[: cut % len(full)]
    r = score_answer(text, CALL, "verbose")
    assert not r.parse_ok and r.parse_error


@pytest.mark.parametrize("task", ["verbose", "terse"])
@pytest.mark.parametrize("accuracy", [0.5, 0.8, 0.95])
def test_simulated_answers_score_at_the_configured_accuracy(task, accuracy):
    rng = random.Random(int(accuracy * 100))
    results = [score_answer(simulated_answer(c, accuracy, rng, task), c, task) for c in sample_calls()]
    summary = summarize_quality(results)
    assert summary.parse_ok_rate == 1.0
    assert abs(summary.item_accuracy - accuracy) <= 0.03


def test_simulated_answer_lengths_follow_the_item_targets():
    rng = random.Random(5)
    ratios = [
        estimate_tokens(simulated_answer(c, 0.8, rng, "verbose")) / c.output_tokens("verbose") for c in sample_calls()
    ]
    assert 0.95 <= statistics.mean(ratios) <= 1.1
    for c in sample_calls()[::9]:
        assert estimate_tokens(simulated_answer(c, 1.0, rng, "terse")) == c.output_tokens("terse")
    with pytest.raises(ValueError):
        simulated_answer(CALL, 1.5, rng)


def test_summary_of_nothing_is_no_data():
    s = summarize_quality([])
    assert s.answers == 0 and s.item_accuracy is None and s.autofail_recall is None and s.score_mae is None


def test_summary_counts_parse_failures_as_wrong():
    ok = score_answer(example_answer(CALL, "terse"), CALL)
    bad = score_answer("not json", CALL)
    s = summarize_quality([ok, bad])
    assert s.parse_ok_rate == 0.5 and s.item_accuracy == 0.5 and s.item_accuracy_parsed == 1.0
    assert s.pass_agreement == 1.0  # only answers with a verdict


def test_record_fields_fit_the_request_record():
    r = score_answer("nope", CALL)
    fields = r.record_fields("terse")
    names = {f.name for f in dataclasses.fields(RequestRecord)}
    assert set(fields) <= names and fields["quality_task"] == "terse" and fields["parse_ok"] is False
