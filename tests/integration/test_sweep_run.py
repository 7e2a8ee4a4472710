"""`slabench sweep` for real: locust processes against one embedded simulator, the run tree, the report — and the
report's numbers recomputed independently from the records (slabench.core.metrics + numpy + statistics, not
analysis/)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from slabench.core import metrics
from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from tests.helpers.locust_run import exit_for

ROOT = Path(__file__).resolve().parents[2]
T975 = {1: 12.706204736174707, 2: 4.302652729749464, 3: 3.182446305284263}  # t(0.975, df), standard table
WARMUP = 1.0

SWEEP = """\
name: it
simulator:
  ttft: 0.02
  itl: 0.002
  jitter: 0.3
  output_tokens: 16
locust_options:
  max-tokens: 16
  prompt-tokens: 64
levels: [1, 2, 4]
repeats: 3
run:
  duration_s: {duration}
  warmup_s: {warmup}
analysis:
  slo:
    ttft_s: 0.05
"""


def sweep(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slabench", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def write_config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "sweep.yaml"
    p.write_text(text)
    return p


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("sweep")
    cfg = write_config(tmp, SWEEP.format(duration=4, warmup=WARMUP))
    p = sweep("sweep", "--config", str(cfg), "--output-dir", str(tmp / "runs"), "--sweep-id", "it-1")
    assert p.returncode == 0, p.stderr[-3000:]
    return tmp / "runs" / "it-1"


@pytest.mark.slow
def test_the_run_tree(done):
    meta = json.loads((done / "sweep.json").read_text())
    assert meta["status"] == "complete" and meta["levels"] == [1, 2, 4] and meta["repeats"] == 3
    assert meta["simulator"]["url"].startswith("http://127.0.0.1:") and "versions" in meta and "git_revision" in meta
    urls = set()
    for level in (1, 2, 4):
        for repeat in (1, 2, 3):
            d = done / str(level) / str(repeat)
            m = json.loads((d / "manifest.json").read_text())
            assert m["status"] == "complete" and m["exit_code"] == exit_for(d) and m["records"] > 0
            assert m["config"]["levels"] == [1, 2, 4] and {"git_revision", "versions", "host", "wall_s"} <= set(m)
            urls.add(m["target_url"])
            assert (d / "locust_stats.csv").exists() and (d / "locust.log").exists()
            recs = read_records(d / "records.jsonl")
            assert len(recs) == m["records"]
            assert {(r.stage_level, r.stage_repeat, r.run_id) for r in recs} == {(level, repeat, m["run_id"])}
    assert urls == {meta["simulator"]["url"]}  # one simulator served every repeat
    for name in ("summary.json", "report.html", "report.md", "plots/ttft_p95.png", "plots/throughput.png",
                 "plots/server_queue_kv.png"):  # fmt: skip
        assert (done / name).stat().st_size > 0
    # The server's side: every run scraped /metrics, and the report cross-checks each run against it.
    server_side = (done / "report.md").read_text().split("## Server side")[1].split("\n## ")[0]
    assert sum(1 for line in server_side.splitlines() if line.startswith("| ") and line[2].isdigit()) == 9


def _independent(run_dir: Path) -> dict:
    """A run's figures straight from its records, by the documented definitions."""
    recs = read_records(run_dir / "records.jsonl")
    t0 = min(r.wall_sent for r in recs)
    counted = [r for r in recs if r.wall_sent >= t0 + WARMUP]
    ok = [r for r in counted if r.outcome is Outcome.OK]
    answered = [r for r in counted if r.outcome is not Outcome.DROPPED]
    start = min(r.wall_sent for r in counted)
    end = max(r.wall_sent + (r.end - r.sent) for r in counted if r.end is not None)
    # a request in flight while its load generator was frozen (run_status.json's stalls) is in no latency figure
    stalls = json.loads((run_dir / "run_status.json").read_text()).get("stalls") or []

    def stalled(r) -> bool:
        begin = r.scheduled if r.scheduled is not None else r.sent
        return any(s["worker"] == r.worker_id and begin < s["end"] and r.end > s["start"] for s in stalls)

    measured = [r for r in ok if not stalled(r)]
    ttfts = [metrics.ttft(r) for r in measured]
    itls = [x for r in measured for x in metrics.itl(r)]
    return {
        "ttft_p95": float(np.percentile(ttfts, 95)),
        "ttft_p50": float(np.percentile(ttfts, 50)),
        "itl_p50": float(np.percentile(itls, 50)),
        "e2e_mean": statistics.fmean(metrics.e2e(r) for r in measured),
        "throughput_rps": len(ok) / (end - start),
        "error_rate": sum(r.outcome is Outcome.ERROR for r in answered) / len(answered),
        "_errors": sum(r.outcome is Outcome.ERROR for r in answered),
        "_answered": len(answered),
        "goodput_rps": sum(metrics.ttft(r) <= 0.05 for r in measured) / (end - start),
        "_ttfts": ttfts,
        "_ok": len(measured),
    }


def test_summary_equals_an_independent_recomputation(done):
    summary = json.loads((done / "summary.json").read_text())
    assert summary["schema_version"] == 2
    for lv in summary["levels"]:
        runs = [_independent(done / str(lv["level"]) / str(r)) for r in (1, 2, 3)]
        # a proportion: the pooled share; with no error at all its Clopper-Pearson bounds are 0 and 1 − 0.025^(1/n)
        errors, answered = sum(r["_errors"] for r in runs), sum(r["_answered"] for r in runs)
        e = lv["metrics"]["error_rate"]
        assert e["mean"] == pytest.approx(errors / answered, rel=1e-9, abs=1e-12)
        assert [r["metrics"]["error_rate"] for r in lv["runs"]] == pytest.approx([r["error_rate"] for r in runs])
        assert 0.0 <= e["ci95_low"] <= e["mean"] <= e["ci95_high"] <= 1.0
        if errors == 0:
            assert e["ci95_low"] == 0.0 and e["ci95_high"] == pytest.approx(1 - 0.025 ** (1 / answered), rel=1e-9)
        for key in ("ttft_p95", "ttft_p50", "itl_p50", "e2e_mean", "throughput_rps", "goodput_rps"):
            vals = [r[key] for r in runs]
            e = lv["metrics"][key]
            mean, sd = statistics.fmean(vals), statistics.stdev(vals)
            assert e["n"] == 3
            assert e["mean"] == pytest.approx(mean, rel=1e-9, abs=1e-12), key
            assert e["std"] == pytest.approx(sd, rel=1e-6, abs=1e-12), key
            if sd == 0:  # identical in every run: zero variance is not certainty, no interval
                assert e["ci95_low"] is None and e["ci95_high"] is None and "zero variance" in e["interval"], key
            elif min(vals) > 0:  # positive figures: Student-t on the log scale (modified Cox, docs/analysis.md)
                ys = [math.log(v) for v in vals]
                s2 = statistics.variance(ys)
                half = T975[2] * math.sqrt(s2 / 3 + s2 * s2 / 4)
                centre = statistics.fmean(ys) + s2 / 2
                assert e["ci95_low"] == pytest.approx(math.exp(centre - half), rel=1e-6, abs=1e-12), key
                assert e["ci95_high"] == pytest.approx(math.exp(centre + half), rel=1e-6, abs=1e-12), key
            else:
                half = T975[2] * sd / math.sqrt(3)
                assert e["ci95_low"] == pytest.approx(max(0.0, mean - half), rel=1e-6, abs=1e-12), key
                assert e["ci95_high"] == pytest.approx(mean + half, rel=1e-6, abs=1e-12), key
            assert [r["metrics"][key] for r in lv["runs"]] == pytest.approx(vals, rel=1e-9, abs=1e-12), key
        pooled = float(np.percentile([t for r in runs for t in r["_ttfts"]], 95))
        assert lv["metrics"]["ttft_p95"]["pooled"] == pytest.approx(pooled, rel=1e-9)
        assert lv["metrics"]["ttft_p95"]["samples"] == sum(r["_ok"] for r in runs)


def test_the_report_shows_the_same_numbers(done):
    summary = json.loads((done / "summary.json").read_text())
    e = summary["levels"][1]["metrics"]["ttft_p95"]
    cell = f"{e['mean'] * 1000:.1f} ± {e['std'] * 1000:.1f}"
    assert cell in (done / "report.md").read_text()
    assert cell in (done / "report.html").read_text()


def test_ctrl_c_keeps_finished_runs_and_resume_finishes_the_rest(tmp_path):
    text = SWEEP.format(duration=3, warmup=0.5).replace("levels: [1, 2, 4]\nrepeats: 3", "levels: [2]\nrepeats: 2")
    cfg = write_config(tmp_path, text)
    out = tmp_path / "runs"
    argv = [sys.executable, "-m", "slabench", "sweep", "--config", str(cfg), "--output-dir", str(out)]
    argv += ["--sweep-id", "it-ctrl-c"]
    err = (tmp_path / "stderr.txt").open("w")
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, text=True)
    d = out / "it-ctrl-c"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        second = d / "2" / "2" / "manifest.json"
        if second.exists() and json.loads(second.read_text())["status"] == "running":
            break
        time.sleep(0.2)
    time.sleep(1.0)  # the second run is under way
    proc.send_signal(signal.SIGINT)
    assert proc.wait(60) == 130
    err.close()
    assert "--resume" in (tmp_path / "stderr.txt").read_text()
    assert json.loads((d / "sweep.json").read_text())["status"] == "interrupted"
    assert json.loads((d / "2" / "1" / "manifest.json").read_text())["status"] == "complete"
    assert json.loads((d / "2" / "2" / "manifest.json").read_text())["status"] == "interrupted"
    kept = hashlib.sha256((d / "2" / "1" / "records.jsonl").read_bytes()).hexdigest()
    # the simulator and the interrupted locust are gone with the sweep
    assert not _listening(json.loads((d / "sweep.json").read_text())["simulator"]["url"])

    p = sweep("sweep", "--config", str(cfg), "--output-dir", str(out), "--resume", str(d))
    assert p.returncode == 0, p.stderr[-3000:]
    assert "1 run(s) already complete, 1 to go" in p.stderr
    assert hashlib.sha256((d / "2" / "1" / "records.jsonl").read_bytes()).hexdigest() == kept
    meta = json.loads((d / "sweep.json").read_text())
    assert meta["status"] == "complete" and len(meta["resumed_at"]) == 1
    level = json.loads((d / "summary.json").read_text())["levels"][0]
    assert level["n_runs"] == 2 and level["metrics"]["ttft_p95"]["n"] == 2


def _listening(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, int(port))) == 0


def test_a_target_that_is_down_fails_fast(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = write_config(tmp_path, SWEEP.format(duration=4, warmup=1) + f"target:\n  url: http://127.0.0.1:{port}\n")
    p = sweep("sweep", "--config", str(cfg), "--output-dir", str(tmp_path / "runs"), "--sweep-id", "down", timeout=60)
    assert p.returncode == 3
    assert f"target http://127.0.0.1:{port} is not reachable" in p.stderr and "Traceback" not in p.stderr
    assert not list((tmp_path / "runs" / "down").glob("*/*"))  # no locust run was started
    assert json.loads((tmp_path / "runs" / "down" / "sweep.json").read_text())["status"] == "failed"


def test_distributed_runs_with_processes(tmp_path):
    """--processes 2: a locust master and 2 workers per run; the records still land in one (Parquet) file per run."""
    text = SWEEP.format(duration=3, warmup=0.5).replace("levels: [1, 2, 4]\nrepeats: 3", "levels: [4]\nrepeats: 2")
    text = text.replace("run:\n", "run:\n  records_format: parquet\n")
    cfg = write_config(tmp_path, text)
    out = tmp_path / "runs"
    p = sweep("sweep", "--config", str(cfg), "--output-dir", str(out), "--sweep-id", "dist", "--processes", "2")
    assert p.returncode == 0, p.stderr[-3000:]
    for repeat in (1, 2):
        d = out / "dist" / "4" / str(repeat)
        m = json.loads((d / "manifest.json").read_text())
        assert m["argv"][m["argv"].index("--processes") + 1] == "2"
        recs = read_records(d / "records.parquet")
        assert len(recs) == m["records"] > 0
        assert len({r.worker_id for r in recs}) == 2 and "local" not in {r.worker_id for r in recs}
    summary = json.loads((out / "dist" / "summary.json").read_text())
    assert summary["levels"][0]["metrics"]["ttft_p50"]["n"] == 2


def test_a_simulator_that_does_not_start_is_one_line_naming_its_complaint(tmp_path):
    text = SWEEP.format(duration=4, warmup=1).replace("simulator:\n", "simulator:\n  profile: no-such-card\n", 1)
    cfg = write_config(tmp_path, text)
    p = sweep("sweep", "--config", str(cfg), "--output-dir", str(tmp_path / "runs"), "--sweep-id", "nosim", timeout=90)
    assert p.returncode == 3, p.stderr
    (line,) = [x for x in p.stderr.splitlines() if x.startswith("slabench:")]
    assert line.startswith("slabench: the embedded simulator did not start: unknown gpu profile 'no-such-card'"), line
    assert not list((tmp_path / "runs" / "nosim").glob("*/*"))  # no locust run was started
    assert json.loads((tmp_path / "runs" / "nosim" / "sweep.json").read_text())["status"] == "failed"


def test_a_saturated_level_is_reported_doubtful_and_the_sweep_goes_on(tmp_path):
    """Each level's run exits 4 on a machine too busy to measure (its users hold the event loop 0.08 s per answer):
    the sweep says why on the level's line, goes on to the next level, and its report says the measurement is
    incomplete."""
    text = SWEEP.format(duration=3, warmup=0.5).replace("levels: [1, 2, 4]\nrepeats: 3", "levels: [1, 2]\nrepeats: 1")
    text = text.replace("analysis:\n", "analysis:\n  require_ci: false\n")
    cfg = write_config(tmp_path, "locustfile: tests/locustfiles/busy_grader_user.py\n" + text)
    argv = [sys.executable, "-m", "slabench", "sweep", "--config", str(cfg), "--output-dir", str(tmp_path / "runs"),
            "--sweep-id", "busy"]  # fmt: skip
    env = {**os.environ, "SLABENCH_TEST_BUSY_S": "0.08"}
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240, env=env)
    assert p.returncode == 0, p.stderr[-3000:]  # a plain sweep: its report, not its code, carries the levels' state
    d = tmp_path / "runs" / "busy"
    for level in (1, 2):
        m = json.loads((d / str(level) / "1" / "manifest.json").read_text())
        assert m["status"] == "complete" and m["exit_code"] == 4 and m["records"] > 0, m
        status = json.loads((d / str(level) / "1" / "run_status.json").read_text())
        assert status["degraded"] and status["saturated"] and not status["incomplete_reasons"], status
        line = f"level {level} repeat 1: the run is incomplete (exit 4): measurement doubtful: saturated"
        assert line in " ".join(p.stderr.split()), p.stderr[-3000:]
    assert "measurement incomplete" in p.stdout and "saturated" in p.stdout, p.stdout[-3000:]
    assert "Measurement incomplete" in (d / "report.md").read_text()
