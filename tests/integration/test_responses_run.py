"""The OpenAI Responses API end to end: a real `locust` run of the chat replay with `--endpoint responses` against the
embedded simulator's `/v1/responses` gives records timed and counted like chat records, which `slabench grade`
grades as it grades chat."""

from __future__ import annotations

import json
import subprocess
import sys

from slabench.core import metrics
from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from tests.locust_run import ROOT, run_locust

WITH_STOP = f"{ROOT / 'locustfiles' / 'chat_replay.py'},slabench/sweep/locust_stage.py"
TOKENS = 12


def test_a_responses_run_gives_chat_like_records_that_grade(tmp_path):
    records_path = tmp_path / "records.jsonl"
    res = run_locust(
        "-f",
        WITH_STOP,
        "--endpoint",
        "responses",
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
    )
    assert res.returncode == 0, res.stderr[-3000:]
    records = [r for r in read_records(records_path) if r.outcome is not Outcome.DROPPED]
    assert len(records) >= 8
    for r in records:
        assert r.endpoint == "responses" and r.outcome is Outcome.OK, r.error_message
        assert r.token_source == "server" and r.completion_tokens == TOKENS and r.finish_reason == "stop"
        assert r.prompt_tokens is not None and r.prompt_tokens > 0
        assert len(r.chunk_times) == TOKENS  # one delta per token: every one stamped
        assert r.sent <= r.first_token <= r.last_token <= r.end
        ttft, itl = metrics.ttft(r), metrics.tpot(r)
        assert ttft is not None and ttft >= 0.02 and itl is not None  # (a busy machine may merge deltas)

    sla = tmp_path / "sla.yaml"
    sla.write_text(
        "schema_version: 1\nname: responses\nload: {concurrency: 2}\n"
        "deployment: {instance_type: g7e.2xlarge}\ntargets:\n  ttft_p95_s: {max: 30}\n"
    )
    grade = [sys.executable, "-m", "slabench", "grade", str(records_path), "--sla", str(sla), "--no-write", "--json"]
    out = subprocess.run(grade, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode in (0, 1), out.stderr  # PASS, or CONDITIONAL on a single short run
    verdict = json.loads(out.stdout)
    assert verdict["checks"][0]["samples"] == sum(r.outcome is Outcome.OK for r in records), out.stderr
