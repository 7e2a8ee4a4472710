"""The generic chat user against real vLLM: complete records, exact token agreement with the server's counters, client
latencies consistent with the server's own histograms, and the scraper's series."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from slabench.core.client import StreamingClient, Target, chat_body
from slabench.core.record import Outcome, RecordMeta
from tests.live.live_checks import (
    assert_complete_records,
    assert_crosscheck_agrees,
    assert_scraper_series,
    assert_tokens_equal_counters,
    describe,
    run_fixed,
)
from tests.live.vllm_server import MODEL_NAME, VllmServer

pytestmark = pytest.mark.live

MAX_TOKENS = 48
WORDS = "order refund return warranty delivery package invoice customer agent account payment please thank you".split()


def prompts_file(path: Path) -> Path:
    """Chat prompts from ~50 to ~2,500 tokens (test_long_prompt_fits covers the longest retail size)."""
    rng = random.Random(7)
    with path.open("w") as f:
        for i, n in enumerate((50, 300, 1000, 2500)):
            text = " ".join(rng.choice(WORDS) for _ in range(n))
            f.write(json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": text}]}) + "\n")
    return path


@pytest.mark.parametrize(("users", "requests"), [(1, 6), (8, 32)])
def test_chat_user_against_vllm(vllm: VllmServer, tmp_path: Path, users: int, requests: int) -> None:
    prompts = str(prompts_file(tmp_path / "prompts.jsonl"))
    run = run_fixed(
        vllm, tmp_path, "FixedCountChatUser", users, requests, "--prompts", prompts, "--max-tokens", str(MAX_TOKENS)
    )
    assert_complete_records(run, requests, MAX_TOKENS)
    assert_tokens_equal_counters(run, requests)
    assert_scraper_series(run)
    c = assert_crosscheck_agrees(run, requests)
    print(describe(f"live chat u={users}", c, len(run.scrapes)))


def test_long_prompt_fits(vllm: VllmServer) -> None:
    """A ~6k-token prompt (the longest retail prompts' size) streams to completion through the harness's client."""
    text = " ".join(random.Random(3).choice(WORDS) for _ in range(6000))
    messages = [{"role": "user", "content": text}]
    body = chat_body(MODEL_NAME, messages, max_tokens=8, stream_options={"include_usage": True})
    client = StreamingClient(Target(vllm.url))
    try:
        r = client.send("chat", body, RecordMeta(run_id="long")).record
    finally:
        client.close()
    assert r.outcome is Outcome.OK, (r.error_category, r.error_message)
    assert r.prompt_tokens > 5000 and r.completion_tokens == 8
