"""The QA-grading user (retail golden calls, real rubric prompts) against real vLLM. The tiny random model's answers
are noise, so every answer must be classified as unparseable: a real quality-failure path, on requests that
themselves succeeded."""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

import pytest

from tests.live.live_checks import (
    assert_complete_records,
    assert_crosscheck_agrees,
    assert_scraper_series,
    assert_tokens_equal_counters,
    describe,
    run_fixed,
)
from tests.live.vllm_server import VllmServer
from tests.locust_run import ROOT

pytestmark = pytest.mark.live

MAX_TOKENS = 24  # the answer is noise whatever its length; short answers keep the runs quick


@pytest.mark.parametrize(("users", "requests"), [(1, 3), (8, 16)])
def test_qa_grading_user_against_vllm(vllm: VllmServer, tmp_path: Path, users: int, requests: int) -> None:
    run = run_fixed(
        vllm, tmp_path, "FixedCountQAUser", users, requests, "--qa-task", "terse", "--qa-max-tokens", str(MAX_TOKENS)
    )
    assert_complete_records(run, requests, MAX_TOKENS)
    assert_tokens_equal_counters(run, requests)
    assert_scraper_series(run)
    c = assert_crosscheck_agrees(run, requests)
    assert max(r.prompt_tokens for r in run.records) > 1000  # real rubric + transcript prompts
    for r in run.records:
        assert r.account and r.item_id
        assert r.quality_task == "terse"
        assert r.parse_ok is False
        assert r.items_expected > 0 and r.items_correct == 0 and r.item_accuracy == 0.0
        assert r.pass_agree is None and r.score_abs_error is None
    print(describe(f"live QA u={users}", c, len(run.scrapes)))


@pytest.mark.parametrize("sizing", ["usage", "tokenizer"])
def test_resized_calls_land_at_their_stated_length_as_vllm_counts(vllm: VllmServer, tmp_path: Path, sizing: str):
    """`--qa-resize on`: each golden call's prompt, as vLLM counts it, against its stated length (the prompt's fixed
    part as this tokenizer counts it + the transcript length the dataset states). As built they come out +12 % at the
    median with this tokenizer (~1.5 tokens per estimator token); resized with `--tokenizer`, +1.0 %; learned from
    the server's usage, +1.6 % and +2.5 % in two sessions once the scale is learned (2026-12-05, 80 requests each):
    held to ±2 % with the tokenizer, ±3 % learned."""
    from slabench.tokens import ChatTokenizer
    from slabench.workload import build_messages, load_golden

    model = str(vllm.model_dir)
    extra = ("--tokenizer", model) if sizing == "tokenizer" else ()
    run = run_fixed(
        vllm, tmp_path, "FixedCountQAUser", 4, 80, "--qa-task", "verbose", "--qa-max-tokens", "8", "--qa-resize", "on",
        *extra,
    )  # fmt: skip
    tok = ChatTokenizer(model)
    golden = {g.item_id: g for g in load_golden(ROOT / "datasets")}
    ratios = []
    for r in sorted(run.records, key=lambda r: r.sent):
        stated = golden[r.item_id]
        fixed = tok.count(build_messages(dataclasses.replace(stated, transcript=""), "verbose"))
        ratios.append(r.prompt_tokens / (fixed + stated.transcript_tokens))
    bound = 0.02
    if sizing == "usage":  # the first requests go out as built, until the server's counts have taught the scale
        assert statistics.median(ratios[:4]) > 1.05, ratios[:4]
        ratios = ratios[16:]
        bound = 0.03  # the scale fitted to the calls that happened to come back first: +1.6 %, +2.5 % so far
    assert abs(statistics.median(ratios) - 1) <= bound, sorted(ratios)
