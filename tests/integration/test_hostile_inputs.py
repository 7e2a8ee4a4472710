"""Hostile input at `recover`, the API key, run ids and the web UI's start form, `plan`, `calibrate`, `--tokenizer`
and `grade` (issue 30): each is one line naming the flag, file or field and what would fix it, exit 3 (never a
traceback), and nothing measured is lost. The sibling of test_bad_input.py."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from slabench.commands.cli import main
from slabench.core.errors import UserError
from slabench.core.prompts import SyntheticPrompts, TokenizerSizer
from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from slabench.core.tokens import ChatTokenizer
from slabench.locust.spool import Journal
from tests.helpers.analysis_helpers import rec, write_run
from tests.helpers.locust_run import CHAT, ROOT, run_locust, run_users, scrape
from tests.helpers.ports import free_port
from tests.helpers.tokenizer_helpers import build_coarse_tokenizer


def one_line(err: str) -> str:
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) == 1, lines
    assert "Traceback" not in err
    return lines[0]


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def read_only(directory: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """`argv` (a slabench command) run while `directory` is read-only: chmod for a normal user; as root (who writes
    anywhere) a read-only bind mount in a mount namespace of its own, gone when the command ends."""
    cmd = [sys.executable, "-m", "slabench", *argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if os.geteuid() != 0:
        mode = directory.stat().st_mode
        directory.chmod(0o555)
        try:
            return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
        finally:
            directory.chmod(mode)
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to make a folder read-only for root")
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    res = subprocess.run(["unshare", "-m", "sh", "-c", script, str(directory), *cmd],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    if "mount:" in res.stderr:
        pytest.skip(f"cannot mount read-only here: {res.stderr.strip()}")
    return res


# -- recover: never loses its input or its output ------------------------------------------------------------------
def write_spool(path: Path, worker: str, answered: int, in_flight: int, run_id: str = "r") -> list[str]:
    """A worker's journal: `answered` requests with their records, `in_flight` that began without one. Their ids."""
    j = Journal(path)
    ids = []
    for i in range(answered + in_flight):
        r = rec(float(i), run_id=run_id, worker_id=worker)
        j.began({"request_id": r.request_id, "started_wall": r.wall_sent, "run_id": run_id, "worker_id": worker})
        if i < answered:
            j.record(r.to_dict())
        ids.append(r.request_id)
    j.close()
    return ids


def test_recover_in_the_records_folder_keeps_its_output_and_the_spools(tmp_path, capsys):
    run = tmp_path / "runs" / "r"
    ids = write_spool(run / "w1.jsonl", "w1", 5, 2) + write_spool(run / "w2.jsonl", "w2", 4, 0)
    master = [rec(100.0 + i, run_id="r", worker_id="w9") for i in range(3)]
    (run / "records.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in master))
    (run / "server_metrics.jsonl").write_text('{"run_id": "r", "t": 1.0}\n')  # the master's scrape log
    out = run / "records.jsonl"

    code, stdout, err = run_cli(["recover", str(run), "--out", str(out)], capsys)
    assert code == 0, err
    assert "14 records" in stdout and "read back whole" in stdout and "spools kept" in stdout, stdout
    got = Counter(r.request_id for r in read_records(out))
    assert got == Counter(ids + [r.request_id for r in master])
    assert (run / "w1.jsonl").exists() and (run / "w2.jsonl").exists()  # kept unless asked
    assert not [p.name for p in run.iterdir() if p.name.startswith(".")]  # no temporary file left

    code, stdout, err = run_cli(["recover", str(run), "--out", str(out), "--remove-spools"], capsys)
    assert code == 0, err
    assert "2 spool file(s) removed" in stdout, stdout
    assert Counter(r.request_id for r in read_records(out)) == got  # again, each request once
    assert not (run / "w1.jsonl").exists() and not (run / "w2.jsonl").exists()
    assert (run / "server_metrics.jsonl").exists()


def test_recover_with_remove_spools_keeps_a_plain_records_file_it_merged(tmp_path, capsys):
    spool = tmp_path / "spool" / "r"
    write_spool(spool / "w1.jsonl", "w1", 3, 1)
    plain = [rec(50.0 + i, run_id="r") for i in range(2)]
    (spool / "copy-of-records.jsonl").write_text("".join(json.dumps(r.to_dict()) + "\n" for r in plain))
    out = tmp_path / "out" / "records.parquet"
    code, _, err = run_cli(["recover", str(spool), "--out", str(out), "--remove-spools"], capsys)
    assert code == 0, err
    assert len(read_records(out)) == 6
    assert (spool / "copy-of-records.jsonl").exists() and not (spool / "w1.jsonl").exists()


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_recover_into_a_read_only_folder_is_one_line_and_loses_nothing(tmp_path, suffix):
    spool = tmp_path / "spool" / "r"
    write_spool(spool / "w1.jsonl", "w1", 3, 1)
    before = (spool / "w1.jsonl").read_bytes()
    target = tmp_path / "ro"
    target.mkdir()
    res = read_only(target, ["recover", str(spool), "--out", str(target / f"records{suffix}"), "--remove-spools"])
    assert res.returncode == 3, res.stderr
    line = one_line(res.stderr)
    assert "--out" in line and str(target) in line, line
    assert (spool / "w1.jsonl").read_bytes() == before
    assert list(target.iterdir()) == []


def test_recover_refuses_a_spool_whose_run_id_would_leave_runs(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_spool(tmp_path / "spool" / "w1.jsonl", "w1", 2, 0, run_id="../../escaped")
    code, _, err = run_cli(["recover", str(tmp_path / "spool")], capsys)
    line = one_line(err)
    assert code == 3 and "run id" in line and "../../escaped" in line, line
    assert not (tmp_path.parent.parent / "escaped").exists()


# -- the API key: refused before any load, never printed -------------------------------------------------------------
SECRET = "sk-test-5ecret-Key"


@pytest.mark.parametrize(
    ("key", "processes"),
    [(SECRET + tail, None) for tail in ("\n", "\r\n", " x", "\x07", "\x1b", "é")] + [(SECRET + "\n", "2")],
)
def test_an_api_key_with_a_control_character_stops_the_run_before_any_load(simulator, tmp_path, key, processes):
    url = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
    env = {**os.environ, "SLABENCH_KEY": key}
    argv = ["-f", "locustfiles/chat_replay.py", "--host", url, "-u", "2", "-r", "2", "-t", "20s"]
    argv += ["--api-key-env", "SLABENCH_KEY", "--records", str(tmp_path / "r.jsonl")]
    res = run_locust(*argv, *(("--processes", processes) if processes else ()), env=env)
    assert res.returncode == 3, res.stderr[-2000:]
    assert "Traceback" not in res.stderr
    lines = [x for x in res.stderr.splitlines() if "slabench:" in x]
    assert lines and all("--api-key-env SLABENCH_KEY" in x for x in lines), lines
    assert SECRET not in res.stderr + res.stdout
    assert scrape(url).get("slabench_sim_requests_received_total", 0) == 0
    assert not (tmp_path / "r.jsonl").exists()


def test_an_api_key_with_a_newline_is_refused_by_every_command_that_reads_one(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SLABENCH_KEY", SECRET + "\n")
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("name: s\nlevels: [1]\nrepeats: 2\nrun: {duration_s: 5}\ntarget: {api_key_env: SLABENCH_KEY}\n")
    for argv, flag in (
        (["simulate", "--port", "0", "--api-key-env", "SLABENCH_KEY"], "--api-key-env SLABENCH_KEY"),
        (["scrape", "--url", "http://127.0.0.1:9", "--out", str(tmp_path / "m.jsonl"), "--api-key-env",
          "SLABENCH_KEY"], "--api-key-env SLABENCH_KEY"),
        (["sweep", "--config", str(sweep), "--output-dir", str(tmp_path / "runs")], "target.api_key_env"),
    ):  # fmt: skip
        code, out, err = run_cli(argv, capsys)
        line = one_line(err)
        assert code == 3 and flag in line and "newline" in line, line
        assert SECRET not in out + err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "m.jsonl").exists()


# -- run ids and the web UI's start form ----------------------------------------------------------------------------
@pytest.mark.parametrize("run_id", ["../../x", "a/b", "x" * 5000, ".hidden", "new\nline", "é"])
def test_a_bad_run_id_is_one_line_before_any_load(simulator, tmp_path, run_id):
    url = simulator("--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
    res = run_locust("-f", "locustfiles/chat_replay.py", "--host", url, "-u", "1", "-t", "20s", "--run-id", run_id)
    assert res.returncode == 3, res.stderr[-2000:]
    lines = [x for x in res.stderr.splitlines() if "/ERROR/" in x or x.startswith("slabench:")]
    assert "Traceback" not in res.stderr and len(lines) == 1 and "--run-id" in lines[0], lines
    assert len(lines[0]) < 400  # the 5,000 characters are not echoed back
    assert scrape(url).get("slabench_sim_requests_received_total", 0) == 0


@pytest.mark.parametrize("sweep_id", ["../x", "x" * 200])
def test_a_bad_sweep_id_is_one_line(tmp_path, capsys, sweep_id):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("name: s\nlevels: [1]\nrepeats: 2\nrun: {duration_s: 5}\n")
    code, _, err = run_cli(["sweep", "--config", str(sweep), "--output-dir", str(tmp_path / "runs"),
                            "--sweep-id", sweep_id], capsys)  # fmt: skip
    assert code == 3 and "--sweep-id" in one_line(err)
    assert not (tmp_path / "x").exists() and not (tmp_path / "runs").exists()


def _post(url: str, form: dict) -> dict:
    return json.loads(urllib.request.urlopen(url, data=urllib.parse.urlencode(form).encode(), timeout=30).read())


def _wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = cond()
            if got:
                return got
        except OSError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_the_web_ui_refuses_a_path_as_run_id_and_finds_the_model_once_the_server_is_up(simulator, tmp_path):
    sim_port, web = free_port(), free_port()
    cwd = tmp_path / "a" / "b"  # a run id of ../../x would write to tmp_path/x
    cwd.mkdir(parents=True)
    argv = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles/chat_replay.py"), "--web-host",
            "127.0.0.1", "--web-port", web, "--host", f"http://127.0.0.1:{sim_port}", "--connect-timeout", "1",
            "--max-tokens", "4", "--prompt-tokens", "16", "--server-metrics", "off"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    base = f"http://127.0.0.1:{web}"
    state = lambda: json.loads(urllib.request.urlopen(f"{base}/stats/requests", timeout=10).read())["state"]  # noqa: E731
    start = {"user_count": 1, "spawn_rate": 1, "host": f"http://127.0.0.1:{sim_port}"}
    try:
        _wait(lambda: urllib.request.urlopen(f"{base}/", timeout=5).read(), 60, "the web UI")
        reply = _post(f"{base}/swarm", {**start, "run_id": "../../x"})
        assert reply["success"] is False and "run id" in reply["message"], reply
        assert state() in ("ready", "stopped")

        assert _post(f"{base}/swarm", {**start, "run_id": "before"})["success"] is True  # the server is not up yet
        _wait(lambda: (cwd / "runs" / "before" / "records.jsonl").stat().st_size > 0, 60, "the first run's records")
        urllib.request.urlopen(f"{base}/stop", data=b"", timeout=30).read()
        _wait(lambda: state() == "stopped", 60, "the first run to stop")

        simulator("--port", sim_port, "--ttft", "0.01", "--itl", "0.001", "--output-tokens", "4")
        assert _post(f"{base}/swarm", {**start, "run_id": "after"})["success"] is True
        after = cwd / "runs" / "after" / "records.jsonl"
        _wait(lambda: after.exists() and sum(r.outcome is Outcome.OK for r in read_records(after)) >= 3, 60, "answers")
        urllib.request.urlopen(f"{base}/stop", data=b"", timeout=30).read()
        _wait(lambda: state() == "stopped", 60, "the second run to stop")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err[-3000:]
    assert not (tmp_path / "x").exists()
    assert all(r.outcome is not Outcome.OK for r in read_records(cwd / "runs" / "before" / "records.jsonl"))
    answered = [r for r in read_records(after) if r.outcome is Outcome.OK]
    assert answered and {r.model for r in answered} == {"slabench-sim"}


# -- plan -------------------------------------------------------------------------------------------------------------
PROFILES = ROOT / "slabench" / "sim" / "profiles"


def _profile(tmp_path: Path, base: str, field: str, value: str) -> Path:
    text = (PROFILES / f"{base}.yaml").read_text()
    lines = [f"{field}: {value}" if line.startswith(f"{field}:") else line for line in text.splitlines()]
    if f"{field}: {value}" not in lines:  # a figure the profile takes from the GPU facts table: stated over it
        lines.append(f"{field}: {value}")
    path = tmp_path / f"{base}-{field}.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("base", "field", "value"),
    [
        ("l4", "memory_bandwidth_gb_s", ".inf"),
        ("l4", "dense_bf16_tflops", ".inf"),
        ("l4", "step_overhead_ms", ".inf"),
        ("l4", "step_overhead_ms", "1e308"),
        ("l4", "memory_bandwidth_gb_s", "1e-300"),
        ("l4", "memory_mib", "0"),
        ("llama-3.2-3b", "params_b", ".inf"),
        ("llama-3.2-3b", "weight_bytes_per_param", "1e308"),
        ("llama-3.2-3b", "activation_kib_per_batched_token", ".nan"),
    ],
)
def test_a_profile_with_an_unphysical_figure_is_one_line(tmp_path, capsys, base, field, value):
    path = _profile(tmp_path, base, field, value)
    which = ["--profiles", str(path)] if base == "l4" else ["--profiles", "l4", "--model", str(path)]
    code, _, err = run_cli(["plan", *which, "--duration", "20", "--out", str(tmp_path / "plan")], capsys)
    line = one_line(err)
    assert code == 3 and str(path) in line and field in line, line
    assert not (tmp_path / "plan").exists()


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--jobs", "-1"], "--jobs"),
        (["--out", "{file}/plan"], "--out"),
        (["--out", "{file}"], "--out"),
        (["--load", "rate", "--rate-rps", "1e9"], "--rate-rps"),
        (["--load", "diurnal", "--diurnal-peak-rps", "1e9"], "--diurnal-peak-rps"),
        (["--load", "diurnal", "--diurnal-peak-rps", "-1"], "--diurnal-peak-rps"),
        (["--price", "l4=inf"], "--price"),
        (["--drain-timeout", "nan"], "--drain-timeout"),
    ],
)
def test_plan_flags_out_of_range_are_one_line(tmp_path, capsys, flags, names):
    (tmp_path / "file").write_text("in the way\n")
    argv = ["plan", "--profiles", "l4", "--duration", "20", *[f.format(file=tmp_path / "file") for f in flags]]
    if "--out" not in flags:
        argv += ["--out", str(tmp_path / "plan")]
    code, _, err = run_cli(argv, capsys)
    line = one_line(err)
    assert code == 3 and names in line, line
    assert (tmp_path / "file").read_text() == "in the way\n"


# -- calibrate --------------------------------------------------------------------------------------------------------
def _calibration_run(folder: Path, model: str = "m", **change) -> Path:
    """A closed-loop run of 12 answered requests; `change` replaces fields of the 5th."""
    folder.mkdir(parents=True)
    rows = []
    for i in range(12):
        sent = 0.3 * i
        first = sent + 0.1
        chunks = [first + 0.01 * k for k in range(20)]
        end = chunks[-1]  # the last chunk's own stamp: times in order, as the client stamps them
        r = rec(0.0, run_id="r", user_id=f"local/{i % 2}", stage_level=2, model=model, max_tokens=20).to_dict()
        r.update(request_id=f"q{i}", sent=sent, first_token=first, last_token=end, end=end, wall_sent=1e9 + sent,
                 chunk_times=chunks, chunk_tokens=None, prompt_tokens=500,
                 completion_tokens=20, first_byte=first)  # fmt: skip
        if i == 4:
            r.update(change)
        rows.append(json.dumps(r) + "\n")
    (folder / "records.jsonl").write_text("".join(rows))
    return folder


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"end": float("nan")}, "NaN is not a JSON number"),
        ({"first_token": float("inf")}, "Infinity is not a JSON number"),
        ({"sent": float("-inf")}, "-Infinity is not a JSON number"),
        ({"first_token": -5.0}, "first_token"),
    ],
)
def test_calibrate_refuses_records_whose_times_are_not_times(tmp_path, capsys, change, says):
    run = _calibration_run(tmp_path / "run", **change)
    out = tmp_path / "gpu.yaml"
    code, _, err = run_cli(["calibrate", str(run), "--out", str(out), "--model", "llama-3.2-3b",
                            "--kv-cache-tokens", "20000"], capsys)  # fmt: skip
    line = one_line(err)
    # refused where the records are read (the record boundary), naming the file, the 5th request's line and why
    assert code == 3 and f"{run / 'records.jsonl'}:5:" in line and says in line, line
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "names"),
    [
        (["--kv-cache-tokens", "-5"], "--kv-cache-tokens"),
        (["--kv-cache-tokens", "0"], "--kv-cache-tokens"),
        (["--max-model-len", "-7"], "--max-model-len"),
        (["--max-model-len", "99999999999999"], "--max-model-len"),
    ],
)
def test_calibrate_flags_out_of_range_are_one_line(tmp_path, capsys, flags, names):
    run = _calibration_run(tmp_path / "run")
    argv = ["calibrate", str(run), "--out", str(tmp_path / "gpu.yaml"), "--model", "llama-3.2-3b"]
    code, _, err = run_cli([*argv, *flags] + ([] if "--kv-cache-tokens" in flags else ["--kv-cache-tokens", "9"]),
                           capsys)  # fmt: skip
    line = one_line(err)
    assert code == 3 and names in line, line
    assert not (tmp_path / "gpu.yaml").exists()


def test_calibrate_refuses_runs_of_two_served_models(tmp_path, capsys):
    a = _calibration_run(tmp_path / "a", model="org/model-a")
    b = _calibration_run(tmp_path / "b", model="org/model-b")
    out = tmp_path / "gpu.yaml"
    code, _, err = run_cli(["calibrate", str(a), str(b), "--out", str(out), "--model", "llama-3.2-3b",
                            "--kv-cache-tokens", "20000"], capsys)  # fmt: skip
    line = one_line(err)
    assert code == 3 and "org/model-a" in line and "org/model-b" in line, line
    assert not out.exists()


# -- grade on a read-only run directory ---------------------------------------------------------------------------
GOOD_SLA = (
    "name: s\nload: {concurrency: 1}\ndeployment: {instance_type: g6e.xlarge}\ntargets:\n  ttft_p95_s: {max: 9}\n"
)


def test_grade_on_a_read_only_run_keeps_its_verdict_and_says_what_it_could_not_write(tmp_path, capsys):
    run = write_run(tmp_path / "s", 1, 1, [rec(float(i)) for i in range(30)])
    sla = tmp_path / "sla.yaml"
    sla.write_text(GOOD_SLA)
    graded, _, err = run_cli(["grade", str(run), "--sla", str(sla), "--no-write"], capsys)
    assert graded in (0, 1, 2, 4), err
    before = sorted(p.name for p in run.iterdir())
    res = read_only(run, ["grade", str(run), "--sla", str(sla)])
    assert res.returncode == graded, res.stderr  # the verdict's own code, not a traceback's 1
    line = one_line(res.stderr)
    assert "verdict.json" in line and str(run) in line and "could not write" in line, line
    assert "PASS" in res.stdout or "CONDITIONAL" in res.stdout or "FAIL" in res.stdout
    assert sorted(p.name for p in run.iterdir()) == before


# -- --tokenizer ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def coarse_tokenizer(tmp_path_factory) -> Path:
    return build_coarse_tokenizer(tmp_path_factory.mktemp("coarse"))


@pytest.mark.parametrize(
    ("config", "jinja", "says"),
    [
        ("[1, 2]", None, "not a JSON object"),
        ('{"chat_template": "{% for m in messages %}{{ m"}', None, "not a valid Jinja template"),
        ('{"chat_template": "{{ raise_exception(\'no system role\') }}"}', None, "fails on one user message"),
        ('{"chat_template": "{{ messages[5][\'content\'] }}"}', None, "fails on one user message"),
        ('{"chat_template": 5}', None, "not one template string"),
        ("{}", b"{% if %}", "not a valid Jinja template"),
        ("{}", b"\xff\xfe{{ x }}", "UTF-8"),
        ("{not json", None, "cannot load it"),
    ],
)
def test_a_broken_tokenizer_folder_is_one_line_naming_the_file(tmp_path, coarse_tokenizer, config, jinja, says):
    d = tmp_path / "tok"
    d.mkdir()
    shutil.copy(coarse_tokenizer / "tokenizer.json", d / "tokenizer.json")
    (d / "tokenizer_config.json").write_text(config)
    if jinja is not None:
        (d / "chat_template.jinja").write_bytes(jinja)
    with pytest.raises(UserError) as e:
        ChatTokenizer(d)
    assert says in str(e.value) and str(d) in str(e.value) and "\n" not in str(e.value), e.value


def test_a_tokenizer_of_another_vocabulary_is_said_once_the_server_counts_otherwise(coarse_tokenizer, caplog):
    sizer = TokenizerSizer(ChatTokenizer(coarse_tokenizer))
    prompts = SyntheticPrompts(500, sizer)
    with caplog.at_level("WARNING", logger="slabench"):
        for _ in range(20):  # the served model's own tokenizer: the server counts what was asked
            prompts.observe(prompts.next(random.Random(1)), 500)
        assert not caplog.records
        for _ in range(40):  # another model's: the server counts a fifth
            prompts.observe(prompts.next(random.Random(1)), 100)
    said = [r.getMessage() for r in caplog.records if "does not count as the server does" in r.getMessage()]
    assert len(said) == 1 and str(coarse_tokenizer) in said[0] and "% of the asked length" in said[0], said


def test_a_locust_run_with_another_models_tokenizer_warns(simulator, coarse_tokenizer):
    url = simulator("--ttft", "0.005", "--itl", "0.001", "--output-tokens", "4")  # counts with the estimator
    res = run_users(CHAT, url, coarse_tokenizer.parent / "r.jsonl", "--prompt-tokens", "256", "--tokenizer",
                    str(coarse_tokenizer), "--max-tokens", "4", users=2, run_time="6s")  # fmt: skip
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    said = [x for x in res.stderr.splitlines() if "does not count as the server does" in x]
    assert len(said) == 1 and "--tokenizer" in said[0], res.stderr[-3000:]


# -- found by the adversarial pass ------------------------------------------------------------------------------------
LONG = "x" * 300  # longer than a file name may be


def test_an_output_name_too_long_for_the_file_system_is_one_line(tmp_path, capsys):
    write_spool(tmp_path / "spool" / "w1.jsonl", "w1", 2, 0)
    for argv in (
        ["recover", str(tmp_path / "spool"), "--out", str(tmp_path / f"{LONG}.jsonl")],
        ["plan", "--profiles", "l4", "--duration", "20", "--out", str(tmp_path / LONG)],
    ):
        code, _, err = run_cli(argv, capsys)
        line = one_line(err)
        assert code == 3 and "--out" in line and "too long" in line, line
    assert (tmp_path / "spool" / "w1.jsonl").exists()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--kv-cache-tokens", "100"], "smaller than the runs' longest request"),
        (["--kv-cache-tokens", "20000", "--out", "{file}/gpu.yaml"], "is a file, not a folder"),
    ],
)
def test_calibrate_refuses_before_the_fit(tmp_path, capsys, flags, says):
    (tmp_path / "file").write_text("in the way\n")
    run = _calibration_run(tmp_path / "run")
    flags = [f.format(file=tmp_path / "file") for f in flags]
    out = [] if "--out" in flags else ["--out", str(tmp_path / "gpu.yaml")]
    code, _, err = run_cli(["calibrate", str(run), "--model", "llama-3.2-3b", *out, *flags], capsys)
    line = one_line(err)
    assert code == 3 and says in line, line
    assert (tmp_path / "file").read_text() == "in the way\n" and not (tmp_path / "gpu.yaml").exists()
