"""`slabench grade`: exit codes 0 PASS / 1 CONDITIONAL / 2 FAIL / 3 invalid input, verdict.json and verdict.md,
over a single run's records and over a sweep's summary.json."""

import json

import pytest

from slabench.sinks import open_sink
from tests.sla_helpers import record, slabench_cli, write


@pytest.fixture
def slabench(monkeypatch):
    return slabench_cli(monkeypatch)


@pytest.fixture
def run_dir(tmp_path):
    """A plain run: 40 requests, TTFT 0.1 s, 4 output tokens each, one request every 0.5 s."""
    d = tmp_path / "run"
    sink = open_sink(d / "records.jsonl")
    sink.write([record(i, sent=0.5 * i) for i in range(40)])
    sink.close()
    return d


def contract(tmp_path, targets: str, extra: str = "") -> str:
    text = f"name: c\nload: {{concurrency: 4}}\ndeployment: {{instance_type: g5.xlarge}}\ntargets:\n{targets}{extra}"
    return str(write(tmp_path, text))


@pytest.mark.parametrize(
    ("targets", "code", "verdict"),
    [
        ("  ttft_p95_s: {max: 0.2}\n  throughput_rps: {min: 1.5}\n", 0, "PASS"),
        ("  ttft_p95_s: {max: 0.08, conditional_band: 0.05}\n", 1, "CONDITIONAL"),
        ("  ttft_p95_s: {max: 0.05, severity: soft}\n", 1, "CONDITIONAL"),
        ("  ttft_p95_s: {max: 0.05}\n", 2, "FAIL"),
        ("  throughput_rps: {min: 5}\n", 2, "FAIL"),
        ("  goodput_rps: {min: 1}\n", 2, "FAIL"),  # not measured by a plain run: no data, never a pass
    ],
)
def test_exit_codes_and_verdict_files(slabench, tmp_path, run_dir, capsys, targets, code, verdict):
    assert slabench(["grade", str(run_dir), "--sla", contract(tmp_path, targets)]) == code
    out = capsys.readouterr().out
    assert verdict in out and "single run" in out
    v = json.loads((run_dir / "verdict.json").read_text())
    assert v["verdict"] == verdict and v["single_run"] is True
    assert all("single run" in c["reason"] or c["no_data"] for c in v["checks"])
    assert v["cost"][0]["metric"] == "cost_per_million_output_tokens_usd"
    assert "$1.006/h" in v["cost"][0]["arithmetic"]
    assert (run_dir / "verdict.md").read_text().startswith(f"## SLA verdict: {verdict}")


def test_a_records_file_can_be_graded_directly(slabench, tmp_path, run_dir):
    sla = contract(tmp_path, "  ttft_p95_s: {max: 0.2}\n")
    assert slabench(["grade", str(run_dir / "records.jsonl"), "--sla", sla, "--no-write"]) == 0
    assert not (run_dir / "verdict.json").exists()


@pytest.mark.parametrize(
    ("targets", "extra", "says"),
    [
        ("  ttft_p95_s: {max: -1}\n", "", "sla.yaml:5: targets.ttft_p95_s.max: Input should be greater than 0"),
        ("  ttft_p95: {max: 1}\n", "", "sla.yaml:5: targets.ttft_p95: unknown key"),
        ("  ttft_p95_s: {max: 1}\n", "quality:\n  verbose:\n    parse_rate: {min: 0.9}\n",
         "sla.yaml:7: quality.verbose: quality floors for task 'verbose', but the run did not grade that task"),
    ],
)  # fmt: skip
def test_invalid_input_exits_3_with_one_line(slabench, tmp_path, run_dir, capsys, targets, extra, says):
    assert slabench(["grade", str(run_dir), "--sla", contract(tmp_path, targets, extra)]) == 3
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_missing_run_dir_and_unknown_instance_type(slabench, tmp_path, run_dir, capsys):
    sla = contract(tmp_path, "  ttft_p95_s: {max: 1}\n")
    assert slabench(["grade", str(tmp_path / "nope"), "--sla", sla]) == 3
    assert "no such run directory" in capsys.readouterr().err
    assert slabench(["grade", str(run_dir), "--sla", sla, "--instance-type", "g9.xlarge"]) == 3
    assert "--instance-type g9.xlarge: unknown instance type" in capsys.readouterr().err
    assert slabench(["grade", str(run_dir), "--sla", sla, "--instance-type", "a", "--instance-type", "b"]) == 3
    assert "once per RUN_DIR" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert slabench(["grade", str(empty), "--sla", sla]) == 3


def summary_dir(tmp_path, name, ttft_mean, thr_mean):
    d = tmp_path / name
    d.mkdir()
    lv = {
        "level": 4,
        "metrics": {
            "ttft_p95": {"mean": ttft_mean, "std": 0.01, "n": 3, "ci95_low": ttft_mean - 0.02,
                         "ci95_high": ttft_mean + 0.02, "samples": 600},
            "throughput_rps": {"mean": thr_mean, "std": 0.1, "n": 3, "ci95_low": thr_mean - 0.2,
                               "ci95_high": thr_mean + 0.2, "samples": 600},
            "output_tokens_per_s": {"mean": thr_mean * 100, "n": 3, "ci95_low": thr_mean * 90,
                                    "ci95_high": thr_mean * 110, "samples": 600},
        },
    }  # fmt: skip
    (d / "summary.json").write_text(json.dumps({"schema_version": 1, "levels": [lv]}))
    return d


def test_sweeps_on_several_instance_types_side_by_side(slabench, tmp_path, capsys):
    g5 = summary_dir(tmp_path, "g5", 0.15, 2.0)
    g6e = summary_dir(tmp_path, "g6e", 0.19, 4.0)
    sla = contract(tmp_path, "  ttft_p95_s: {max: 0.2}\n", "capacity: {target_load_rps: 103}\n")
    code = slabench(["grade", str(g5), str(g6e), "--sla", sla, "--instance-type", "g5.xlarge",
                     "--instance-type", "g6e.xlarge"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1  # g6e's CI (0.17–0.21 s) crosses 0.2 s: the worst of PASS and CONDITIONAL
    assert "capacity per instance type graded" in out
    v5 = json.loads((g5 / "verdict.json").read_text())
    v6 = json.loads((g6e / "verdict.json").read_text())
    assert (v5["verdict"], v6["verdict"]) == ("PASS", "CONDITIONAL")
    assert v5["single_run"] is False and "95% CI upper bound" in v5["checks"][0]["reason"]
    # g5: CI lower bound 1.8 req/s per replica → ⌈103 / 1.8⌉ = 58 replicas × $1.006/h
    assert v5["capacity"]["replicas_needed"] == 58
    assert v5["capacity"]["usd_per_hour"] == pytest.approx(58 * 1.006)
    assert v6["capacity"]["highest_passing"] is None


def test_json_output(slabench, tmp_path, run_dir, capsys):
    assert slabench(["grade", str(run_dir), "--sla", contract(tmp_path, "  ttft_p95_s: {max: 1}\n"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "PASS"


def test_a_degraded_run_cannot_pass(slabench, tmp_path, run_dir):
    status = {"schema_version": 1, "degraded": True, "lost_workers": ["w2"], "workers_without_final_batch": []}
    (run_dir / "run_status.json").write_text(json.dumps(status))
    assert slabench(["grade", str(run_dir), "--sla", contract(tmp_path, "  ttft_p95_s: {max: 1}\n")]) == 1
    v = json.loads((run_dir / "verdict.json").read_text())
    assert v["checks"][0]["status"] == "PASS" and v["verdict"] == "CONDITIONAL"
    assert any("degraded" in n and "w2" in n for n in v["notes"])


def test_a_degraded_runs_verdict_says_why_and_what_the_server_counted(slabench, tmp_path, run_dir):
    status = {
        "schema_version": 1,
        "degraded": True,
        "incomplete_reasons": ["1 worker(s) lost: w2"],
        "accounting": {"unrecorded": 3, "note": "the server received 40 requests, 3 more than the records account for"},
    }
    (run_dir / "run_status.json").write_text(json.dumps(status))
    assert slabench(["grade", str(run_dir), "--sla", contract(tmp_path, "  ttft_p95_s: {max: 1}\n")]) == 1
    notes = json.loads((run_dir / "verdict.json").read_text())["notes"]
    assert any("1 worker(s) lost: w2" in n and "3 more than the records" in n for n in notes), notes
