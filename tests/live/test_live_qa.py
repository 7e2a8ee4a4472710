"""The QA-grading user (retail golden calls, real rubric prompts) against real vLLM. The tiny random model's answers
are noise, so every answer must be classified as unparseable: a real quality-failure path, on requests that
themselves succeeded."""

from __future__ import annotations

import dataclasses
import re
import statistics
from pathlib import Path

import pytest

from tests.helpers.locust_run import ROOT
from tests.live.live_checks import (
    assert_complete_records,
    assert_crosscheck_agrees,
    assert_scraper_series,
    assert_tokens_equal_counters,
    describe,
    run_fixed,
)
from tests.live.vllm_server import VllmServer

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
    """`--qa-resize on`: each golden call's prompt as vLLM counts it, against its stated length (the prompt's fixed
    part as this tokenizer counts it + the transcript length the dataset states). As built, the golden calls come out
    +12 % at the median with this tokenizer (~1.5 tokens per estimator token). Resized, vLLM counts every call sent as
    the tokenizer does, and all 250 golden calls at the run's scale land within ±2 % at the median (+1.0 % at the
    tokenizer's scale, 2026-12-05). That median is taken over the whole golden set, not the 80 calls the run drew:
    their own median moves by ±1.5 % with the draw (half the calls are as short as their scored lines allow)."""
    from slabench.core.tokens import ChatTokenizer
    from slabench.workload import build_item, build_messages, load_golden
    from slabench.workload.sizing import TokenizerScale

    model = str(vllm.model_dir)
    extra = ("--tokenizer", model) if sizing == "tokenizer" else ()
    run = run_fixed(
        vllm, tmp_path, "FixedCountQAUser", 4, 80, "--qa-task", "verbose", "--qa-max-tokens", "8", "--qa-resize", "on",
        *extra,
    )  # fmt: skip
    tok = ChatTokenizer(model)
    golden = load_golden(ROOT / "datasets")
    by_id = {g.item_id: g for g in golden}

    def ratio(call, sent_tokens: int) -> float:
        return sent_tokens / (
            tok.count(build_messages(dataclasses.replace(call, transcript=""), "verbose")) + call.transcript_tokens
        )

    said = re.search(r"QA transcripts sized at ([\d.]+) model tokens per estimator token", run.stderr)
    assert said, run.stderr[-2000:]
    scale, measured = float(said[1]), TokenizerScale(tok, golden)
    records = sorted(run.records, key=lambda r: r.sent)
    if sizing == "tokenizer":
        assert scale == pytest.approx(measured.value, abs=1e-4)
        for r in records:  # what was sent is the call resized at that scale, and vLLM counts it as the tokenizer
            assert r.prompt_tokens == tok.count(build_messages(measured.build(by_id[r.item_id]), "verbose"))
    else:  # the first requests go out as built, until the server's counts have taught the scale
        assert statistics.median(ratio(by_id[r.item_id], r.prompt_tokens) for r in records[:4]) > 1.05
        assert scale == pytest.approx(measured.value, rel=0.03)
    landed = [ratio(g, tok.count(build_messages(build_item(g, token_scale=scale), "verbose"))) for g in golden]
    median = statistics.median(landed)
    assert abs(median - 1) <= 0.02, median
    drawn = statistics.median(ratio(by_id[r.item_id], r.prompt_tokens) for r in records[16:])
    print(f"resized ({sizing}): scale {scale:.4f}, golden median {median - 1:+.2%}, the run's draws {drawn - 1:+.2%}")
