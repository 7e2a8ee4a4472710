"""Bad input, one test per class: each is one line naming the file or option and what fixes it, exit 3, no traceback,
and nothing already measured is lost (no load is sent before the input is checked)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from slabench.commands.cli import main
from tests.helpers.analysis_helpers import rec, write_run
from tests.helpers.locust_run import ROOT, run_locust, scrape
from tests.helpers.ports import free_port

BINARY = bytes(range(256)) * 4  # NUL bytes, invalid UTF-8: what a wrong path (an image, a tarball) looks like
CHAT = "locustfiles/chat_replay.py"
GOOD_SLA = (
    "name: s\nload: {concurrency: 1}\ndeployment: {instance_type: g6e.xlarge}\ntargets:\n  ttft_p95_s: {max: 9}\n"
)


def one_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1, lines
    assert "Traceback" not in err
    return lines[0]


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


def locust_error(res) -> list[str]:
    """The ERROR lines of a locust run (Locust logs around them; a user mistake must be one line)."""
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    return [x for x in res.stderr.splitlines() if "/ERROR/" in x or x.startswith("slabench:")]


# -- binary / non-UTF-8 files -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["sweep", "--config", "{bin}"], "{bin}"),
        (["grade", "{run}", "--sla", "{bin}"], "{bin}"),
        (["fleet", "check", "--nodes", "{bin}"], "{bin}"),
        (["grade", "{binrecords}", "--sla", "{sla}"], "{binrecords}"),
        (["aggregate", "{binrecords}"], "{binrecords}"),
        (["recover", "{binrecords}", "--out", "{tmp}/out.jsonl"], "{binrecords}"),
        (
            ["deploy", "--dry-run", "--sla", "{sla}", "--model", "m/x", "--revision", "abc",
             "--weights-s3", "s3://bucket/p", "--serving-values", "{bin}"],
            "{bin}",
        ),
    ],
)  # fmt: skip
def test_binary_files_are_one_line_errors(tmp_path, capsys, argv, names):
    fmt = {
        "bin": str(tmp_path / "file.yaml"),
        "run": str(tmp_path / "run"),
        "sla": str(tmp_path / "sla.yaml"),
        "binrecords": str(tmp_path / "bin" / "records.jsonl"),
        "tmp": str(tmp_path),
    }
    (tmp_path / "file.yaml").write_bytes(BINARY)
    (tmp_path / "sla.yaml").write_text(GOOD_SLA)
    write_run(tmp_path / "run", 1, 1, [rec(float(i)) for i in range(3)])
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "records.jsonl").write_bytes(json.dumps(rec(0.0).to_dict()).encode() + b"\n" + BINARY + b"\n")
    code, err = run_cli([a.format(**fmt) for a in argv], capsys)
    line = one_line(err)
    assert code == 3, err
    assert names.format(**fmt) in line and ("UTF-8" in line or "binary file" in line), line


def test_a_binary_sla_file_for_locust_is_one_line_before_any_load(simulator, tmp_path):
    url = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
    (tmp_path / "sla.yaml").write_bytes(BINARY)
    res = run_locust("-f", CHAT, "--host", url, "-u", "1", "-t", "3s", "--sla", str(tmp_path / "sla.yaml"))
    assert res.returncode == 3
    (line,) = locust_error(res)
    assert "sla.yaml" in line and ("UTF-8" in line or "binary file" in line)
    assert scrape(url).get("slabench_sim_requests_received_total", 0) == 0


# -- corrupt Parquet ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["aggregate", "grade"])
def test_a_corrupt_parquet_records_file_is_one_line(tmp_path, capsys, command):
    path = tmp_path / "run" / "records.parquet"
    path.parent.mkdir()
    path.write_bytes(b"PAR1" + BINARY + b"PAR1")
    (tmp_path / "sla.yaml").write_text(GOOD_SLA)
    argv = [command, str(path)] + (["--sla", str(tmp_path / "sla.yaml")] if command == "grade" else [])
    code, err = run_cli(argv, capsys)
    line = one_line(err)
    assert code == 3 and str(path) in line and "Parquet" in line, line


# -- --records: checked before any load -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("records", "says"),
    [
        ("{file}/records.jsonl", "is a file, not a folder"),
        ("{tmp}/records.csv", "use a .jsonl or .parquet path"),
        ("/proc/slabench-test/records.jsonl", "cannot create"),  # unwritable even for root
        ("{tmp}/dir.jsonl", "is a directory"),
    ],
)
def test_a_bad_records_path_stops_the_run_before_any_load(simulator, tmp_path, records, says):
    url = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
    (tmp_path / "file").write_text("in the way\n")
    (tmp_path / "dir.jsonl").mkdir()
    path = records.format(file=tmp_path / "file", tmp=tmp_path)
    t0 = time.monotonic()
    res = run_locust("-f", CHAT, "--host", url, "-u", "2", "-t", "20s", "--records", path)
    assert res.returncode == 3, res.stderr[-2000:]
    (line,) = locust_error(res)
    assert "--records" in line and says in line, line
    assert time.monotonic() - t0 < 15  # not the whole -t
    assert scrape(url).get("slabench_sim_requests_received_total", 0) == 0


# -- --prompts and the QA dataset: checked once, at start ---------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "file not found"),
        ("", "no prompts"),
        ('{"messages": [{"role": "user", "content": "hi"}]}\nnot json\n', ":2:"),
        (BINARY, "binary file"),
        ('{"messages": [{"role": "user", "content": "caf\xe9"}]}\n'.encode("latin-1"), "UTF-8"),
    ],
)
def test_a_bad_prompts_file_is_one_line_at_start(simulator, tmp_path, content, says):
    url = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
    prompts = tmp_path / "prompts.jsonl"
    if isinstance(content, bytes):
        prompts.write_bytes(content)
    elif content is not None:
        prompts.write_text(content)
    res = run_locust("-f", CHAT, "--host", url, "-u", "4", "-r", "4", "-t", "20s", "--prompts", str(prompts))
    assert res.returncode == 3, res.stderr[-2000:]
    (line,) = locust_error(res)  # once, not once per user
    assert "prompts.jsonl" in line and says in line, line
    assert scrape(url).get("slabench_sim_requests_received_total", 0) == 0


def test_a_missing_qa_dataset_is_one_line_at_start(simulator, tmp_path):
    url = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
    argv = ["-f", "locustfiles/qa_grading.py", "--host", url, "-u", "4", "-r", "4", "-t", "20s"]
    res = run_locust(*argv, "--dataset-dir", str(tmp_path / "nowhere"), "--processes", "2")
    assert res.returncode == 3, res.stderr[-2000:]
    lines = locust_error(res)
    assert len(lines) == 1 and "--dataset-dir" in lines[0] and "nowhere" in lines[0], lines
    assert scrape(url).get("slabench_sim_requests_received_total", 0) == 0


# -- numeric ranges ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("-u", "0"), "-u"),
        (("--max-tokens", "-5"), "--max-tokens"),
        (("--prompt-tokens", "-10"), "--prompt-tokens"),
        (("--request-timeout", "-1"), "--request-timeout"),
        (("--connect-timeout", "0"), "--connect-timeout"),
    ],
)
def test_numbers_out_of_range_are_one_line_before_any_load(simulator, args, option):
    url = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
    res = run_locust("-f", CHAT, "--host", url, "-t", "20s", *(("-u", "1") if "-u" not in args else ()), *args)
    assert res.returncode == 3, res.stderr[-2000:]
    (line,) = locust_error(res)
    assert option in line, line
    assert scrape(url).get("slabench_sim_requests_received_total", 0) == 0


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_simulate_port_out_of_range(capsys, port):
    code, err = run_cli(["simulate", "--port", port], capsys)
    assert code == 3 and "--port" in one_line(err)


# -- output under a regular file ---------------------------------------------------------------------------------
def test_output_under_a_regular_file_is_one_line_and_loses_nothing(tmp_path, capsys):
    write_run(tmp_path / "s", 1, 1, [rec(float(i)) for i in range(3)])
    (tmp_path / "f").write_text("in the way\n")
    code, err = run_cli(["aggregate", str(tmp_path / "s"), "--out", str(tmp_path / "f" / "report")], capsys)
    assert code == 3 and "--out" in one_line(err) and "is a file" in err
    assert (tmp_path / "f").read_text() == "in the way\n"
    code, err = run_cli(["dataset", "stats", "--plot", str(tmp_path / "f" / "d.png")], capsys)
    assert code == 3 and "--plot" in one_line(err) and "is a file" in err


# -- a run without its manifest -----------------------------------------------------------------------------------
def test_aggregate_does_not_count_a_run_without_its_manifest_as_complete(tmp_path, capsys):
    write_run(tmp_path / "s", 1, 1, [rec(float(i)) for i in range(3)])
    d = write_run(tmp_path / "s", 1, 2, [rec(float(i)) for i in range(3)])
    (d / "manifest.json").unlink()
    code, err = run_cli(["aggregate", str(tmp_path / "s")], capsys)
    line = one_line(err)
    assert code == 3 and str(d / "manifest.json") in line and "--resume" in line, line
    assert not (tmp_path / "s" / "summary.json").exists()


# -- the web UI's host field ------------------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["", "notaurl", "ftp://x"])
def test_the_web_ui_refuses_a_bad_host_at_start(tmp_path, host):
    port = free_port()
    argv = [sys.executable, "-m", "locust", "-f", CHAT, "--web-host", "127.0.0.1", "--web-port", port]
    argv += ["--records", str(tmp_path / "r.jsonl")]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read()
                break
            except OSError:
                assert time.monotonic() < deadline, "the web UI did not start"
                time.sleep(0.3)
        form = urllib.parse.urlencode({"user_count": 1, "spawn_rate": 1, "host": host}).encode()
        reply = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/swarm", data=form, timeout=30).read())
        state = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/stats/requests", timeout=10).read())
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert reply["success"] is False and "host" in reply["message"].lower(), reply
    assert state["state"] in ("ready", "stopped"), state  # nothing was started
    assert "Traceback" not in err


# -- weights hydrate against an endpoint that never answers -------------------------------------------------------
@pytest.mark.slow
def test_hydrate_against_a_silent_endpoint_gives_up_within_a_minute(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held = []

    def accept_and_hold():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            held.append(conn)  # accepted, never answered

    threading.Thread(target=accept_and_hold, daemon=True).start()
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}
    argv = [sys.executable, "-m", "slabench", "weights", "hydrate", "--source", "s3://bucket/m/rev"]
    argv += ["--dest", str(tmp_path / "dest"), "--endpoint-url", f"http://127.0.0.1:{srv.getsockname()[1]}"]
    argv += ["--progress", "log"]
    t0 = time.monotonic()
    try:
        res = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    finally:
        srv.close()
        for c in held:
            c.close()
    took = time.monotonic() - t0
    assert took < 60, took
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "no answer" in res.stderr and "s3://bucket/m/rev" in res.stderr, res.stderr[-2000:]
    assert not Path(tmp_path / "dest" / "config.json").exists()


def test_an_embedded_simulator_that_does_not_start_stops_the_run_at_once(tmp_path):
    res = run_locust("-f", CHAT, "-u", "1", "-t", "30s", "--records", str(tmp_path / "r.jsonl"),
                     "--sim-profile", "no-such-card")  # fmt: skip
    assert res.returncode == 3, res.stderr[-2000:]
    lines = locust_error(res)
    assert any("no-such-card" in x for x in lines), lines  # the simulator's own complaint
    assert any("the embedded simulator did not start: its message is above" in x for x in lines), lines
    assert not (tmp_path / "r.jsonl").exists()
