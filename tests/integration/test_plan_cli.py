"""`slabench plan` as a user runs it: the table, plan.json and plan.png; exit 0 when a profile meets the checks,
2 when none does, 3 with one line for bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_plan import TOY_MODEL, toy_gpu

ROOT = Path(__file__).resolve().parents[2]


def slabench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slabench", "plan", *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )


def files(tmp_path: Path, targets: str) -> tuple[str, str, str, str]:
    """A toy card (one request at a time, 100 ms a step), a toy model, a contract, and a queue of four requests at
    once every 10 s (10 prompt + 10 output tokens each)."""
    model = tmp_path / "toy-model.yaml"
    model.write_text(TOY_MODEL)
    sla = tmp_path / "sla.yaml"
    sla.write_text(
        f"name: toy\nload: {{scenario: burst}}\ndeployment: {{instance_type: g6e.xlarge}}\ntargets:\n{targets}"
    )
    queue = tmp_path / "q.csv"
    queue.write_text(
        "offset_s,prompt_tokens,output_tokens\n" + "".join(f"{10.0 * (i // 4)},10,10\n" for i in range(40))
    )
    return toy_gpu(tmp_path, 1), str(model), str(sla), str(queue)


def test_plan_writes_the_answer_its_cost_and_the_plot(tmp_path):
    gpu, model, sla, queue = files(tmp_path, "  ttft_p95_s: {max: 0.5}\n")
    out = tmp_path / "plan"
    r = slabench(
        "--profiles", gpu, "--model", model, "--sla", sla, "--queue", queue, "--price", "toy1=2", "--out", str(out)
    )
    assert r.returncode == 0, r.stderr
    assert "toy1" in r.stdout and "round-robin" in r.stdout and "--price for toy1" in r.stdout
    doc = json.loads((out / "plan.json").read_text())
    (row,) = doc["profiles"]
    assert row["replicas"] == 4  # worked out in tests/unit/test_plan.py
    assert row["one_fewer"]["replicas"] == 3 and not row["one_fewer"]["meets"]
    assert abs(row["answer"]["drain_s"] - 91.0) < 1e-6  # groups at 0..90 s, the last done 1.0 s later
    # Planned and priced at the pessimistic end of the default ×1.3 step-time interval: still 4 replicas (TTFT
    # 0.13 s alone; with 3 one request waits a whole other one), the last done 1.3 s after the last group.
    assert row["replicas_90"] == {"low": 4, "high": 4} and row["planned_replicas"] == 4
    assert abs(row["planned"]["drain_s"] - 91.3) < 1e-6
    hours = row["planned"]["drain_s"] / 3600
    assert row["cost"]["usd_per_hour"] == 8.0
    assert abs(row["cost"]["per_1000_calls_usd"] - 8.0 * hours / 40 * 1000) < 1e-9
    assert abs(row["cost"]["per_million_output_tokens_usd"] - 8.0 * hours / 400 * 1e6) < 1e-6
    assert any("balancing: round-robin" in a for a in doc["assumptions"])
    assert (out / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_exits_2_when_no_profile_meets(tmp_path):
    gpu, model, sla, queue = files(tmp_path, "  e2e_p95_s: {max: 0.5}\n")
    r = slabench(
        "--profiles",
        gpu,
        "--model",
        model,
        "--sla",
        sla,
        "--queue",
        queue,
        "--price",
        "toy1=2",
        "--out",
        str(tmp_path / "o"),
    )
    assert r.returncode == 2, r.stderr
    assert "no fleet can meet e2e_p95_s" in r.stdout


def one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 3, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_a_profile_without_a_price(tmp_path):
    gpu, model, sla, queue = files(tmp_path, "  ttft_p95_s: {max: 0.5}\n")
    line = one_line_error(slabench("--profiles", gpu, "--model", model, "--sla", sla, "--queue", queue))
    assert "toy1: no `instances` to price it by" in line and "--price toy1=" in line


def test_unknown_profile(tmp_path):
    line = one_line_error(slabench("--profiles", "l4,h100", "--out", str(tmp_path / "o")))
    assert "unknown gpu profile 'h100'" in line and "a10g" in line


def test_contract_without_latency_checks(tmp_path):
    gpu, _, _, queue = files(tmp_path, "")
    sla = tmp_path / "throughput-only.yaml"
    sla.write_text(
        "name: t\nload: {concurrency: 4}\ndeployment: {instance_type: g6e.xlarge}\n"
        "targets:\n  throughput_rps: {min: 1}\n"
    )
    line = one_line_error(
        slabench("--sla", str(sla), "--profiles", gpu, "--queue", queue, "--out", str(tmp_path / "o"))
    )
    assert "throughput-only.yaml" in line and "no latency checks" in line and "ttft_p95_s" in line


def test_queue_file_that_does_not_parse(tmp_path):
    gpu, model, sla, _ = files(tmp_path, "  ttft_p95_s: {max: 0.5}\n")
    bad = tmp_path / "bad.csv"
    bad.write_text("offset_s,account\n0.5,A\nsoon,B\n")
    line = one_line_error(
        slabench("--profiles", gpu, "--model", model, "--sla", sla, "--queue", str(bad), "--price", "toy1=2")
    )
    assert "bad.csv:3" in line and "'soon' is not a number" in line


def test_plan_is_made_for_the_serving_flags_given(tmp_path):
    """The toy card runs one request at a time by its profile (four replicas for four requests at once); planned for
    the flags a team deploys, --max-num-seqs 4 (on the command line, or in the chart's values), one replica does."""
    gpu, model, sla, queue = files(tmp_path, "  ttft_p95_s: {max: 0.5}\n")
    common = ("--profiles", gpu, "--model", model, "--sla", sla, "--queue", queue, "--price", "toy1=2", "--json")

    def replicas(*flags: str) -> tuple[int, list[str]]:
        r = slabench(*common, "--out", str(tmp_path / f"o{len(flags)}"), *flags)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        return doc["profiles"][0]["replicas"], doc["assumptions"]

    assert replicas()[0] == 4
    n, assumptions = replicas("--max-num-seqs", "4")
    assert n == 1 and any("vLLM --max-num-seqs 4" in a for a in assumptions)
    values = tmp_path / "values.yaml"
    values.write_text("model:\n  maxNumSeqs: 4\n  maxNumBatchedTokens: 0\n")
    n, assumptions = replicas("--serving-values", str(values), "--prefix-caching", "off")
    assert n == 1 and any("--max-num-seqs 4" in a and "--no-enable-prefix-caching" in a for a in assumptions)
    # the command line wins over the values file
    assert replicas("--serving-values", str(values), "--max-num-seqs", "1")[0] == 4
    bad = slabench(*common, "--max-num-seqs", "0")
    assert bad.returncode == 3 and "serving flags" in bad.stderr and "max_num_seqs" in bad.stderr
    values.write_text("- not a mapping\n")
    bad = slabench(*common, "--serving-values", str(values))
    assert bad.returncode == 3 and "a Helm values file is a mapping" in bad.stderr


def test_the_plan_is_sized_at_the_pessimistic_end_of_the_interval(tmp_path):
    """The case of tests/unit/test_plan.py worked by hand: E2E p95 ≤ 2.5 s, four at once, one at a time per replica —
    2 replicas by the model, 4 at ×1.3 (the default), priced at 4; `--step-time-factor 1` plans at the model's 2."""
    gpu, model, sla, queue = files(tmp_path, "  e2e_p95_s: {max: 2.5}\n")

    def plan(*flags: str) -> tuple[dict, str]:
        out = tmp_path / f"plan{len(flags)}"
        argv = ["--profiles", gpu, "--model", model, "--sla", sla, "--queue", queue, "--price", "toy1=2"]
        r = slabench(*argv, "--out", str(out), *flags)
        assert r.returncode == 0, r.stderr
        return json.loads((out / "plan.json").read_text())["profiles"][0], r.stdout

    row, said = plan()
    assert (row["replicas"], row["replicas_90"], row["planned_replicas"]) == (2, {"low": 2, "high": 4}, 4)
    assert row["cost"]["usd_per_hour"] == 8.0 and "2 (90 %: 2–4)" in said and "pessimistic end" in said
    e2e = row["figures_90"]["e2e_p95"]  # a request alone: 10 steps of 100 ms × 1/1.3, 1, 1.3 (+ roofline ~1e-8 s)
    assert e2e == pytest.approx({"optimistic": 1 / 1.3, "model": 1.0, "pessimistic": 1.3})
    row, _ = plan("--step-time-factor", "1")
    assert (row["replicas_90"], row["planned_replicas"], row["cost"]["usd_per_hour"]) == ({"low": 2, "high": 2}, 2, 4.0)
    bad = slabench("--profiles", gpu, "--model", model, "--sla", sla, "--queue", queue, "--step-time-factor", "0.5")
    assert bad.returncode == 3 and "--step-time-factor 0.5: must be from 1" in bad.stderr
