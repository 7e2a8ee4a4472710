"""The QA-grading user (retail golden calls, real rubric prompts) against real vLLM. The tiny random model's answers
are noise, so every answer must be classified as unparseable: a real quality-failure path, on requests that
themselves succeeded."""

from __future__ import annotations

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
