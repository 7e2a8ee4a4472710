"""A 2-level × 2-repeat sweep of the QA-grading user against real vLLM: it runs, aggregates per level with confidence
intervals, and grades against an SLA contract, which fails on quality (the tiny random model never answers in the
rubric's JSON) while the latency and error checks pass."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from tests.helpers.locust_run import ROOT, assert_exit
from tests.live.vllm_server import MODEL_NAME, VllmServer

pytestmark = pytest.mark.live

SWEEP = """\
name: live-vllm
target: {{url: "{url}"}}
locustfile: locustfiles/qa_grading.py
locust_options: {{qa-task: terse, qa-max-tokens: 16}}
levels: [1, 2]
repeats: 2
run: {{requests: 4, max_duration_s: 300, stop_timeout_s: 120}}
output_dir: "{out}"
"""
SLA = """\
schema_version: 1
name: live-tiny
load: {concurrency: 2}
deployment: {instance_type: g6e.xlarge, replicas: 1, gpus_per_replica: 1}
min_repeats: 2
targets:
  ttft_p95_s: {max: 120.0}
  error_rate: {max: 0.01}
quality:
  terse:
    parse_rate: {min: 0.99}
"""


def slabench(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def test_sweep_aggregates_and_grades_against_vllm(vllm: VllmServer, tmp_path: Path) -> None:
    (tmp_path / "sweep.yaml").write_text(SWEEP.format(url=vllm.url, out=tmp_path / "runs"))
    (tmp_path / "sla.yaml").write_text(SLA)
    res = slabench("-m", "slabench", "sweep", "--config", str(tmp_path / "sweep.yaml"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    (sweep_dir,) = (tmp_path / "runs").iterdir()

    # Four runs, each with records from vLLM stamped with their level and repeat.
    for level in (1, 2):
        for repeat in (1, 2):
            records = read_records(sweep_dir / str(level) / str(repeat) / "records.jsonl")
            answered = [r for r in records if r.outcome is Outcome.OK]
            assert len(answered) >= 4
            assert {(r.stage_level, r.stage_repeat) for r in records} == {(level, repeat)}
            assert all(r.model == MODEL_NAME and r.token_source == "server" for r in answered)
            assert all(r.parse_ok is False for r in answered)

    # Aggregated per level across the two repeats.
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert (sweep_dir / "report.html").exists()
    levels = {lv["level"]: lv for lv in summary["levels"]}
    assert set(levels) == {1, 2}
    for lv in levels.values():
        assert lv["n_runs"] == 2
        ttft = lv["metrics"]["ttft_p50"]
        assert ttft["n"] == 2 and ttft["ci95_low"] <= ttft["mean"] <= ttft["ci95_high"]

    # Graded: 8 requests per level are too few to prove a p95 or a 1 % error ceiling (CONDITIONAL, said so), and
    # quality fails → FAIL, exit code 2.
    res = slabench("-m", "slabench", "grade", str(sweep_dir), "--sla", str(tmp_path / "sla.yaml"), "--json")
    assert_exit(res.returncode, sweep_dir, 2, output=res.stdout[-2000:] + res.stderr)  # 4: vLLM saturated the machine
    verdict = json.loads(res.stdout)
    checks = {c["check"]: c["status"] for c in verdict["checks"]}
    assert checks == {"ttft_p95_s": "CONDITIONAL", "error_rate": "CONDITIONAL", "quality.terse.parse_rate": "FAIL"}
    reasons = {c["check"]: c["reason"] for c in verdict["checks"]}
    # two runs: the log-scale interval of the p95 is too wide to prove the target, or the samples too few for it
    ttft_reason = reasons["ttft_p95_s"]
    assert "too few samples" in ttft_reason or "95% CI upper bound" in ttft_reason, ttft_reason
    assert "clopper-pearson" in reasons["error_rate"]
    assert verdict["verdict"] == "FAIL"
