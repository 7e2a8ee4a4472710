"""End to end over a real sweep: `slabench sweep` (real locust runs against the embedded simulator, 2 levels × 2
repeats), then `slabench grade` on the sweep directory — aggregated on the spot and from its summary.json — with a
contract that passes (exit 0) and one that fails (exit 2). And the single-run estimates agree with the aggregator's
per-run figures on the same records, so a plain Locust run and a sweep are graded by the same definitions."""

import json
import subprocess
import sys

import pytest

from slabench.core.sinks import read_records
from tests.helpers.locust_run import ROOT, assert_exit, pass_or_doubtful
from tests.helpers.sla_helpers import slabench_cli, write

aggregate_runs = pytest.importorskip("slabench.analysis.aggregate", reason="needs the aggregator (issue 5)")
pytest.importorskip("slabench.sweep.cli", reason="needs `slabench sweep` (issue 5)")

SWEEP = """\
name: sla-e2e
simulator: {ttft: 0.02, itl: 0.002, jitter: 0.2, output_tokens: 20}
locust_options: {max-tokens: 20, prompt-tokens: 32}
levels: [2, 4]
repeats: 3  # with two, a t-interval (t = 12.7) of a busy machine's run-to-run spread can straddle a target
run: {requests: 30, max_duration_s: 30}
analysis: {report: false}
"""

PASSES = """\
name: sweep-passes
load: {concurrency: 4}
deployment: {instance_type: g6e.xlarge}
min_repeats: 2
targets:
  ttft_p95_s: {max: 2.0}
  error_rate: {max: 0.1}  # 0 errors in 90 requests: Clopper-Pearson upper bound 4 %
  throughput_rps: {min: 1}
  cost_per_million_output_tokens_usd: {max: 100}
capacity: {target_load_rps: 103}
"""
FAILS = PASSES.replace("ttft_p95_s: {max: 2.0}", "ttft_p95_s: {max: 0.001}")


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    cfg = write(tmp, SWEEP, "sweep.yaml")
    argv = [sys.executable, "-m", "slabench", "sweep", "--config", str(cfg), "--sweep-id", "s",
            "--output-dir", str(tmp / "runs")]  # fmt: skip
    p = subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return tmp / "runs" / "s"


def grade(monkeypatch, *argv):
    return slabench_cli(monkeypatch)(["grade", *map(str, argv)])


def test_grading_a_sweep_passes_and_fails_with_exit_codes(sweep_dir, tmp_path, monkeypatch):
    assert not (sweep_dir / "summary.json").exists()
    code = grade(monkeypatch, sweep_dir, "--sla", write(tmp_path, PASSES))
    assert_exit(code, sweep_dir, 0)  # 4 only when a busy machine saturated a run, as the verdict says
    v = json.loads((sweep_dir / "verdict.json").read_text())
    assert (
        v["verdict"] == pass_or_doubtful(code, v) and v["single_run"] is False and v["source"].endswith("(aggregated)")
    )
    assert all(c["n"] == 3 and c["ci95_high"] is not None for c in v["checks"])
    assert "95% CI" in v["checks"][0]["reason"] and "single run" not in json.dumps(v["checks"])
    assert [lv["level"] for lv in v["levels"]] == ["concurrency 2", "concurrency 4"]
    assert v["capacity"]["highest_passing"] == "concurrency 4" and v["capacity"]["replicas_needed"] >= 1

    assert_exit(grade(monkeypatch, sweep_dir, "--sla", write(tmp_path, FAILS)), sweep_dir, 2)
    v = json.loads((sweep_dir / "verdict.json").read_text())
    assert v["verdict"] == "FAIL" and v["checks"][0]["status"] == "FAIL"
    assert v["capacity"]["highest_passing"] is None


def test_summary_json_and_on_the_spot_aggregation_grade_alike(sweep_dir, tmp_path):
    from slabench.sla.grade_run import grade_run_dir

    sla = write(tmp_path, PASSES)
    on_the_spot = grade_run_dir(sweep_dir, sla)
    summary = aggregate_runs.aggregate(sweep_dir)
    (sweep_dir / "summary.json").write_text(aggregate_runs.summary_json(summary))
    try:
        from_file = grade_run_dir(sweep_dir, sla)
    finally:
        (sweep_dir / "summary.json").unlink()
    assert on_the_spot.source.endswith("(aggregated)") and from_file.source.endswith("summary.json")
    assert [(c.check, c.status, c.observed, c.bound) for c in from_file.checks] == [
        (c.check, c.status, c.observed, c.bound) for c in on_the_spot.checks
    ]
    level4 = summary.level(4).metrics
    assert from_file.checks[0].observed == pytest.approx(level4["ttft_p95"].mean)
    assert from_file.checks[0].bound == pytest.approx(level4["ttft_p95"].ci95_high)


def test_single_run_estimates_match_the_aggregator_per_run(sweep_dir):
    from slabench.sla.single_run import levels_from_records

    summary = aggregate_runs.aggregate(sweep_dir)
    compared = 0
    for lv in summary.levels:
        for run in lv.runs:
            (mine,) = levels_from_records(read_records(run.path))
            for key, value in run.metrics.items():
                if key in mine.metrics and value is not None:
                    assert mine.metrics[key].mean == pytest.approx(value, rel=1e-9, abs=1e-12), (run.path, key)
                    compared += 1
    assert compared >= 4 * 20  # latencies, rates and throughputs of every run


def test_sweep_with_sla_grades_at_the_end(tmp_path):
    cfg = write(tmp_path, SWEEP.replace("levels: [2, 4]", "levels: [4]"), "sweep.yaml")

    def sweep(contract: str, sweep_id: str) -> int:
        argv = [
            sys.executable,
            "-m",
            "slabench",
            "sweep",
            "--config",
            str(cfg),
            "--sweep-id",
            sweep_id,
            "--output-dir",
            str(tmp_path / "runs"),
            "--sla",
            str(write(tmp_path, contract, f"{sweep_id}.yaml")),
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=180, cwd=ROOT).returncode

    code = sweep(PASSES, "pass")
    assert_exit(code, tmp_path / "runs" / "pass", 0)
    verdict = json.loads((tmp_path / "runs" / "pass" / "verdict.json").read_text())
    assert verdict["verdict"] == pass_or_doubtful(code, verdict)
    assert_exit(sweep(FAILS, "fail"), tmp_path / "runs" / "fail", 2)
    bad = PASSES.replace("ttft_p95_s:", "ttft_p59_s:")
    assert sweep(bad, "bad") == 3
    assert not (tmp_path / "runs" / "bad").exists()  # a bad contract sends no load
