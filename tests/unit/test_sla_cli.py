"""`slabench grade`: exit codes 0 PASS / 1 CONDITIONAL / 2 FAIL / 3 invalid input, verdict.json and verdict.md,
over a single run's records and over a sweep's summary.json."""

import json

import pytest

from slabench.core.sinks import open_sink
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
        "level": 4, "n_runs": 3, "requests": 600, "duration_s": 30.0, "error_counts": {}, "runs": [],
        "metrics": {
            "ttft_p95": {"mean": ttft_mean, "std": 0.01, "n": 3, "ci95_low": ttft_mean - 0.02,
                         "ci95_high": ttft_mean + 0.02, "samples": 600},
            "throughput_rps": {"mean": thr_mean, "std": 0.1, "n": 3, "ci95_low": thr_mean - 0.2,
                               "ci95_high": thr_mean + 0.2, "samples": 600},
            "output_tokens_per_s": {"mean": thr_mean * 100, "n": 3, "ci95_low": thr_mean * 90,
                                    "ci95_high": thr_mean * 110, "samples": 600},
        },
    }  # fmt: skip
    doc = {"kind": "slabench.sweep_summary", "schema_version": 2, "source": name, "cliff": {}, "levels": [lv]}
    (d / "summary.json").write_text(json.dumps(doc))
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
    status = {"schema_version": 1, "run_id": "r", "records": 40, "degraded": True, "lost_workers": ["w2"]}
    (run_dir / "run_status.json").write_text(json.dumps(status))
    # every check passes, but the evidence is incomplete: never PASS, and exit 4 (not an SLA result)
    assert slabench(["grade", str(run_dir), "--sla", contract(tmp_path, "  ttft_p95_s: {max: 1}\n")]) == 4
    v = json.loads((run_dir / "verdict.json").read_text())
    assert v["checks"][0]["status"] == "PASS" and v["verdict"] == "CONDITIONAL"
    assert v["measurement"] == "incomplete" and any("w2" in n for n in v["incomplete"])


def test_saturation_is_judged_by_the_contracts_measurement_policy(slabench, tmp_path, run_dir):
    # The Locust process saw its CPU above 90 % in 3 samples and the simulator's steps ran 1.5 s late over 19.5 s.
    saturation = {"cpu_samples_over_90": 3, "open_loop_sends": 0}
    status = {"schema_version": 1, "run_id": "r", "records": 40, "saturation": saturation}
    (run_dir / "run_status.json").write_text(json.dumps(status))
    scrape = {"schema_version": 1, "run_id": "r", "gauges": {}, "histograms": {}}
    lines = [
        {**scrape, "t": 0.0, "counters": {"slabench_sim_engine_late_seconds_total": 0.0}},
        {**scrape, "t": 19.5, "counters": {"slabench_sim_engine_late_seconds_total": 1.5,
                                           "slabench_sim_engine_late_steps_total": 120}},
    ]  # fmt: skip
    (run_dir / "server_metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    targets = "  ttft_p95_s: {max: 1}\n"
    assert slabench(["grade", str(run_dir), "--sla", contract(tmp_path, targets)]) == 4
    v = json.loads((run_dir / "verdict.json").read_text())
    assert v["verdict"] == "CONDITIONAL" and v["checks"][0]["status"] == "PASS"
    (why,) = v["incomplete"]
    assert "CPU was above 90 % in 3 samples" in why and "1.50 s late in all over 19.5 s" in why
    # A contract that tolerates both (its own call) grades the same run as PASS.
    lenient = "measurement: {max_cpu_samples_over_90: 3, max_simulator_late_share: 0.1}\n"
    assert slabench(["grade", str(run_dir), "--sla", contract(tmp_path, targets, lenient)]) == 0
    assert json.loads((run_dir / "verdict.json").read_text())["measurement"] == "complete"


def test_the_verdict_reads_in_an_80_column_ci_log(slabench, tmp_path, run_dir, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # what a CI log (not a TTY) gets
    targets = "  ttft_p95_s: {max: 1}\n  cost_per_million_output_tokens_usd: {max: 100}\n  throughput_rps: {min: 1}\n"
    slabench(["grade", str(run_dir), "--sla", contract(tmp_path, targets)])
    out = capsys.readouterr().out
    table = out.split("target (severity; runs / samples)", 1)[1].split("PASS ttft_p95_s:", 1)[0]  # before the reasons
    assert max(len(line) for line in table.splitlines()) <= 80
    for name in ("ttft_p95_s", "cost_per_million_output_tokens_usd", "throughput_rps"):
        assert any(line.split() and line.split()[-1] == name for line in table.splitlines()), name  # never wrapped


def test_a_summary_older_than_its_sweep_is_refused_and_a_copied_sweep_grades(slabench, tmp_path, capsys):
    """A run redone after aggregation: the summary no longer describes the records on disk, so grading it would
    judge measurements that are not there. A copy (new mtimes, same runs) is the same sweep."""
    import shutil

    from tests.analysis_helpers import rec, write_run

    sweep = tmp_path / "sweep"
    for repeat in (1, 2):
        write_run(sweep, 4, repeat, [rec(float(i), ttft=0.1) for i in range(30)])
    assert slabench(["aggregate", str(sweep)]) == 0
    sla = contract(tmp_path, "  ttft_p95_s: {max: 0.5}\n")
    copy = tmp_path / "downloaded"
    shutil.copytree(sweep, copy)
    assert slabench(["grade", str(copy), "--sla", sla, "--no-write"]) in (0, 1)
    manifest = sweep / "4" / "2" / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"L4-r2"', '"L4-r2-redone"'))  # the repeat was run again
    capsys.readouterr()
    assert slabench(["grade", str(sweep), "--sla", sla, "--no-write"]) == 3
    err = capsys.readouterr().err
    assert "its runs are not the finished runs beside it" in err and "slabench aggregate" in err
