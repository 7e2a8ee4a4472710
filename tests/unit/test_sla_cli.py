"""`slabench grade`: exit codes 0 PASS / 1 CONDITIONAL / 2 FAIL / 3 invalid input, verdict.json and verdict.md,
over a single run's records and over a sweep's summary.json."""

import json
import math

import pytest

from slabench.core.sinks import open_sink
from tests.helpers.sla_helpers import record, slabench_cli, write


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


def sweep_dir(tmp_path, name, ttfts, spacings):
    """A sweep at 4 users, one repeat per (TTFT, spacing): 40 requests each, all with that TTFT, one every
    `spacing` seconds; aggregated into its summary.json."""
    from tests.helpers.analysis_helpers import rec, write_run

    d = tmp_path / name
    for repeat, (ttft, gap) in enumerate(zip(ttfts, spacings, strict=True), 1):
        write_run(d, 4, repeat, [rec(gap * i, ttft=ttft, run_id=f"{name}{repeat}") for i in range(40)])
    return d


def test_sweeps_on_several_instance_types_side_by_side(slabench, tmp_path, capsys):
    g5 = sweep_dir(tmp_path, "g5", (0.14, 0.15, 0.16), (0.5, 0.48, 0.52))
    g6e = sweep_dir(tmp_path, "g6e", (0.18, 0.19, 0.20), (0.25, 0.24, 0.26))
    for d in (g5, g6e):
        assert slabench(["aggregate", str(d)]) == 0
    sla = contract(tmp_path, "  ttft_p95_s: {max: 0.2}\n", "capacity: {target_load_rps: 103}\n")
    capsys.readouterr()
    code = slabench(["grade", str(g5), str(g6e), "--sla", sla, "--instance-type", "g5.xlarge",
                     "--instance-type", "g6e.xlarge"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1  # g6e's CI (0.165–0.215 s) crosses 0.2 s: the worst of PASS and CONDITIONAL
    assert "capacity per instance type graded" in out
    v5 = json.loads((g5 / "verdict.json").read_text())
    v6 = json.loads((g6e / "verdict.json").read_text())
    assert (v5["verdict"], v6["verdict"]) == ("PASS", "CONDITIONAL")
    assert v5["single_run"] is False and "95% CI upper bound" in v5["checks"][0]["reason"]
    # g5: ⌈103 / the CI lower bound of its throughput per replica⌉ replicas × $1.006/h
    per_replica = v5["capacity"]["per_replica_rps"]
    assert per_replica < 2.1 and v5["capacity"]["replicas_needed"] == math.ceil(103 / per_replica)
    assert v5["capacity"]["usd_per_hour"] == pytest.approx(v5["capacity"]["replicas_needed"] * 1.006)
    assert v6["capacity"]["highest_passing"] is None
    # The verdict names the records it was computed from, by content hash.
    assert sorted(v5["records_sha256"]) == [str(g5 / "4" / str(r) / "records.jsonl") for r in (1, 2, 3)]


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

    from tests.helpers.analysis_helpers import rec, write_run

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


def test_a_summary_is_checked_against_its_records(slabench, tmp_path, capsys):
    """summary.json is a cache: a figure edited by hand, a records file changed after aggregation, or a summary too old
    to carry the hashes of its records are each refused with one line (exit 3) saying to aggregate again."""
    g = sweep_dir(tmp_path, "s", (0.3, 0.31), (0.5, 0.5))
    assert slabench(["aggregate", str(g)]) == 0
    sla = contract(tmp_path, "  ttft_p95_s: {max: 0.2}\n")
    assert slabench(["grade", str(g), "--sla", sla, "--no-write"]) == 2  # the records say FAIL
    summary = g / "summary.json"
    original = summary.read_text()
    doc = json.loads(original)
    doc["levels"][0]["metrics"]["ttft_p95"].update(mean=0.1, ci95_low=0.09, ci95_high=0.11)  # a FAIL made a PASS
    summary.write_text(json.dumps(doc))
    capsys.readouterr()
    assert slabench(["grade", str(g), "--sla", sla, "--no-write"]) == 3
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "levels[0].metrics.ttft_p95.mean is 0.1, the records give 0.30" in line
    assert f"slabench aggregate {g}" in line and "edited" in line
    summary.write_text(original)
    records = g / "4" / "2" / "records.jsonl"
    records.write_text(records.read_text().replace('"completion_tokens": 3', '"completion_tokens": 4'))
    assert slabench(["grade", str(g), "--sla", sla, "--no-write"]) == 3
    err = capsys.readouterr().err
    assert f"{records} changed since it was aggregated (sha256" in err and "slabench aggregate" in err
    doc = json.loads(original)
    doc["schema_minor"] = 1
    summary.write_text(json.dumps(doc))
    assert slabench(["grade", str(g), "--sla", sla, "--no-write"]) == 3
    assert "summary minor 1) without the sha256 of its records" in capsys.readouterr().err


def test_requests_in_flight_during_a_freeze_leave_the_latency_figures(slabench, tmp_path):
    """run_status.json's stalls: requests the load generator held through a freeze are counted, and no latency figure
    (nor goodput) uses them; the verdict says how many."""
    d = tmp_path / "frozen"
    sink = open_sink(d / "records.jsonl")
    held = [record(i, sent=0.5 * i, ttft=3.1, worker_id="w1") for i in (40, 41)]  # the freeze is in their TTFT
    sink.write([record(i, sent=0.5 * i, worker_id="w1") for i in range(40)] + held)
    sink.close()
    sla = contract(tmp_path, "  ttft_p99_s: {max: 1}\n")
    assert slabench(["grade", str(d), "--sla", sla]) == 2  # without the stall known: a FAIL on the freeze
    stall = {"worker": "w1", "start": 20.6, "end": 23.6}
    status = {"kind": "slabench.run_status", "schema_version": 1, "schema_minor": 5, "run_id": "r", "records": 42,
              "incomplete_reasons": [], "stalls": [stall]}  # fmt: skip
    (d / "run_status.json").write_text(json.dumps(status))
    assert slabench(["grade", str(d), "--sla", sla]) == 1  # 40 measured requests: few samples for a p99
    v = json.loads((d / "verdict.json").read_text())
    assert v["checks"][0]["observed"] == pytest.approx(0.1)
    assert any("2 request(s) were in flight while the load generator was frozen" in n for n in v["notes"])
    other = {**stall, "worker": "w2"}  # another process's freeze held none of w1's requests
    (d / "run_status.json").write_text(json.dumps({**status, "stalls": [other]}))
    assert slabench(["grade", str(d), "--sla", sla]) == 2


def _users_run(tmp_path, name, spans, level=4, **kw):
    """A sweep tree with one run at `level` users: user u sends back-to-back 0.2 s requests over spans[u] seconds."""
    from tests.helpers.analysis_helpers import rec, write_run

    records = []
    for u, (start, stop) in enumerate(spans):
        t = start
        while t + 0.2 <= stop:
            records.append(rec(t, ttft=0.1, gaps=(0.05, 0.05), user_id=f"w/{u}", run_id=name, **kw))
            t += 0.2
    write_run(tmp_path / name, level, 1, records)
    return tmp_path / name


def test_a_level_never_reached_cannot_pass(slabench, tmp_path, capsys):
    """Four users configured, two spawned for most of the window (a spawn rate too low for the run's time): graded at
    its level, the run would speak for a load it never carried — CONDITIONAL at best, exit 4, the measured load
    beside the configured one."""
    sla = contract(tmp_path, "  ttft_p95_s: {max: 0.5}\n")
    full = _users_run(tmp_path, "full", [(0, 20)] * 4)
    assert slabench(["grade", str(full), "--sla", sla]) == 0
    v = json.loads((full / "verdict.json").read_text())
    assert v["measured_load"] == 4 and v["verdict"] == "PASS"
    assert v["summary"].startswith("PASS: c at concurrency 4 (measured 4 users) on 1 × g5.xlarge")
    late = _users_run(tmp_path, "late", [(0, 20), (0, 20), (14, 20), (16, 20)])  # users 3 and 4 came late
    capsys.readouterr()
    assert slabench(["aggregate", str(late)]) == 0
    assert "4 users: the load was not reached — 2 users were active" in capsys.readouterr().out
    summary = json.loads((late / "summary.json").read_text())
    assert (summary["levels"][0]["measured_level"], summary["levels"][0]["level_reached"]) == (2, False)
    assert slabench(["grade", str(late), "--sla", sla]) == 4
    v = json.loads((late / "verdict.json").read_text())
    assert v["checks"][0]["status"] == "PASS" and v["verdict"] == "CONDITIONAL" and v["measured_load"] == 2
    assert any("concurrency 4: the load was not reached — 2 users" in r for r in v["incomplete"])
    assert v["levels"] == [{"level": "concurrency 4", "verdict": "CONDITIONAL"}]  # capacity cannot count it either


def test_an_open_loop_rate_never_reached_cannot_pass(slabench, tmp_path):
    """10 req/s configured, 5 req/s sent: graded at 10 req/s only as incomplete, the achieved rate beside it."""
    from slabench.core.record import StageUnit
    from tests.helpers.analysis_helpers import rec

    sla = str(write(tmp_path, "name: c\nload: {request_rate_rps: 10}\ndeployment: {instance_type: g5.xlarge}\n"
                    "targets:\n  ttft_p95_s: {max: 0.5}\n"))  # fmt: skip
    for name, every in (("kept", 0.1), ("halved", 0.2)):
        d = tmp_path / name
        sink = open_sink(d / "records.jsonl")
        sink.write([
            rec(i * every, ttft=0.1, scheduled=i * every, stage_level=10_000, stage_unit=StageUnit.MILLI_RPS,
                user_id="w/1")
            for i in range(200)
        ])  # fmt: skip
        sink.close()
    assert slabench(["grade", str(tmp_path / "kept"), "--sla", sla]) == 0
    kept = json.loads((tmp_path / "kept" / "verdict.json").read_text())
    assert kept["measured_load"] == pytest.approx(10) and kept["measurement"] == "complete"
    assert slabench(["grade", str(tmp_path / "halved"), "--sla", sla]) == 4
    v = json.loads((tmp_path / "halved" / "verdict.json").read_text())
    assert v["measured_load"] == pytest.approx(5)
    assert any("10 req/s: the load was not reached — 5 req/s were sent" in r for r in v["incomplete"])


def test_a_summary_written_elsewhere_is_checked_against_the_records_it_names(slabench, tmp_path, capsys):
    g = sweep_dir(tmp_path, "s", (0.1, 0.11), (0.5, 0.5))
    out = tmp_path / "report"
    assert slabench(["aggregate", str(g), "--out", str(out)]) == 0
    sla = contract(tmp_path, "  ttft_p95_s: {max: 0.2}\n")
    assert slabench(["grade", str(out), "--sla", sla, "--no-write"]) == 0  # from the records it names (`source`)
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "summary.json").write_text((out / "summary.json").read_text().replace(str(g), str(tmp_path / "gone")))
    capsys.readouterr()
    assert slabench(["grade", str(alone), "--sla", sla, "--no-write"]) == 3  # no records: no verdict
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "a summary is a cache of its records, and they cannot be read again" in line
