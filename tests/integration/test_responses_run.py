"""The OpenAI Responses API and reasoning models end to end: a real `locust` run of the chat replay with `--endpoint
responses` against the embedded simulator's `/v1/responses` gives records timed and counted like chat records, which
`slabench grade` grades as it grades chat; with a reasoning phase (`--sim-reasoning-tokens`), chat and Responses
records carry both clocks and the reasoning's tokens, aggregated as `ttft_answer_*` and graded as `ttfat_*_s`."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slabench.analysis.columns import read_table, run_arrays
from slabench.analysis.figures import metric_values
from slabench.core import metrics
from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from tests.helpers.locust_run import ROOT, assert_exit, run_locust

WITH_STOP = f"{ROOT / 'locustfiles' / 'chat_replay.py'},slabench/sweep/locust_stage.py"
TOKENS = 12


def run(tmp_path, endpoint: str, *extra: str):
    records_path = tmp_path / "records.jsonl"
    res = run_locust(
        "-f",
        WITH_STOP,
        "--endpoint",
        endpoint,
        "-u",
        "2",
        "-r",
        "2",
        "--stop-after-requests",
        "8",
        "-t",
        "90s",
        "--sim-ttft",
        "0.02",
        "--sim-itl",
        "0.002",
        "--sim-output-tokens",
        str(TOKENS),
        "--prompt-tokens",
        "40",
        "--records",
        str(records_path),
        *extra,
    )
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    records = [r for r in read_records(records_path) if r.outcome is not Outcome.DROPPED]
    assert len(records) >= 8
    return records_path, records


def test_the_chat_replay_with_endpoint_completions_calls_the_completions_api(tmp_path):
    """`--endpoint completions` sends the chat replay's messages to /v1/completions as one prompt (it once sent chat
    requests whatever the flag said)."""
    _, records = run(tmp_path, "completions")
    for r in records:
        assert r.endpoint == "completions" and r.outcome is Outcome.OK, r.error_message
        assert r.token_source == "server" and r.completion_tokens == TOKENS and r.prompt_tokens


def grade(tmp_path, records_path, target: str) -> dict:
    sla = tmp_path / "sla.yaml"
    sla.write_text(
        "schema_version: 1\nname: t\nload: {concurrency: 2}\n"
        f"deployment: {{instance_type: g7e.2xlarge}}\ntargets:\n  {target}: {{max: 30}}\n"
    )
    argv = [sys.executable, "-m", "slabench", "grade", str(records_path), "--sla", str(sla), "--no-write", "--json"]
    out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert_exit(out.returncode, records_path.parent, 0, 1, output=out.stderr)  # PASS, CONDITIONAL (one short run)
    return json.loads(out.stdout)


def test_a_responses_run_gives_chat_like_records_that_grade(tmp_path):
    records_path, records = run(tmp_path, "responses")
    for r in records:
        assert r.endpoint == "responses" and r.outcome is Outcome.OK, r.error_message
        assert r.token_source == "server" and r.completion_tokens == TOKENS and r.finish_reason == "stop"
        assert r.prompt_tokens is not None and r.prompt_tokens > 0
        assert len(r.chunk_times) == TOKENS  # one delta per token: every one stamped
        assert r.sent <= r.first_token <= r.last_token <= r.end
        ttft, itl = metrics.ttft(r), metrics.tpot(r)
        assert ttft is not None and ttft >= 0.02 and itl is not None  # (a busy machine may merge deltas)

    verdict = grade(tmp_path, records_path, "ttft_p95_s")
    assert verdict["checks"][0]["samples"] == sum(r.outcome is Outcome.OK for r in records)


REASONING = 5


@pytest.mark.parametrize("endpoint", ["chat", "responses"])
def test_a_reasoning_model_has_both_clocks_in_records_figures_and_grading(tmp_path, endpoint):
    records_path, records = run(tmp_path, endpoint, "--sim-reasoning-tokens", str(REASONING))
    for r in records:
        assert r.outcome is Outcome.OK, r.error_message
        assert r.completion_tokens == TOKENS + REASONING and len(r.chunk_times) == TOKENS + REASONING
        assert (r.reasoning_tokens, r.reasoning_source) == (REASONING, "server")
        assert r.first_token == r.chunk_times[0] and r.first_answer_token == r.chunk_times[REASONING]
        assert metrics.ttft_answer(r) >= metrics.ttft(r)
    figures = metric_values([run_arrays(read_table(records_path))])
    assert figures["ttft_answer_p50"].samples == len(records)
    # after the reasoning (equal only where a busy machine merged a stream's chunks into one read)
    assert figures["ttft_answer_p50"].value >= figures["ttft_p50"].value
    verdict = grade(tmp_path, records_path, "ttfat_p95_s")
    check = verdict["checks"][0]
    assert check["samples"] == len(records) and check["observed"] == pytest.approx(figures["ttft_answer_p95"].value)
