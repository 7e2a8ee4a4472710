"""Run the real `locust` command (headless) and read what it left behind."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class LocustResult:
    returncode: int
    stdout: str
    stderr: str
    pid: int


def run_locust(*args: str, timeout: float = 120, env: dict | None = None) -> LocustResult:
    argv = [sys.executable, "-m", "locust", "--headless", "--only-summary", *args]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            raise
    return LocustResult(p.returncode, out, err, p.pid)


CHAT = "locustfiles/chat_replay.py"


def run_users(
    locustfile: str | Path,
    host: str | None,
    records: str | Path,
    *extra: str,
    users: int,
    run_time: str,
    spawn_rate: int | str | None = None,
    stop_timeout: float | None = None,
    timeout: float = 120,
    env: dict | None = None,
) -> LocustResult:
    """The closed-loop run most tests make: `users` users of `locustfile` (all spawned at once unless `spawn_rate`)
    against `host` (None: the embedded simulator) for `run_time`, records at `records`; `extra` adds options."""
    argv = ["-f", str(locustfile), *(("--host", host) if host else ())]
    argv += ["-u", str(users), "-r", str(spawn_rate or users), "-t", run_time, "--records", str(records)]
    if stop_timeout is not None:
        argv += ["--stop-timeout", f"{stop_timeout:g}"]
    return run_locust(*argv, *extra, timeout=timeout, env=env)


def scrape(url: str) -> dict[str, float]:
    """Prometheus samples at `url`/metrics, summed over labels: {sample name: value}."""
    import urllib.request

    text = urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def _status(run_dir: Path) -> dict:
    import json

    return json.loads((run_dir / "run_status.json").read_text())


def exit_for(run_dir: Path) -> int:
    """The exit code a finished plain run (no --sla) owes what its run_status.json says: 4 when it is incomplete, its
    load generator was frozen mid-run or the default measurement policy found it saturated — a busy test machine does
    those two — else 0."""
    status = _status(run_dir)
    return 4 if status.get("incomplete_reasons") or status.get("stalls") or status.get("saturated") else 0


def machine_doubtful(run_dir: Path, since: float = 0.0) -> bool:
    """Whether the runs under `run_dir` (one run, a sweep, a scratch tree: those written since `since`) are doubtful
    only because of the machine: their run_status.json say saturated or frozen, or their verdict's only incomplete
    lines are saturation (with --sla, the contract's own measurement policy) — and none lacks anything (a lost
    worker, requests not sent, nothing answered). A test that needs a clean run accepts exit 4 for that alone, never
    for a reason it does not expect."""
    import json

    fresh = [p for p in run_dir.rglob("*.json") if p.name in ("run_status.json", "verdict.json")]
    fresh = [p for p in fresh if p.stat().st_mtime >= since]
    statuses = [json.loads(p.read_text()) for p in fresh if p.name == "run_status.json"]
    graded = [r for p in fresh if p.name == "verdict.json" for r in json.loads(p.read_text()).get("incomplete", [])]
    machine = any(s.get("saturated") or s.get("stalls") for s in statuses) or graded
    missing = any(s.get("incomplete_reasons") for s in statuses) or not all("saturated: " in r for r in graded)
    return bool(machine) and not missing


def pass_or_doubtful(code: int, verdict: dict) -> str:
    """The verdict a contract every check of which the run meets owes: PASS, or — on a run a busy machine made
    doubtful (exit 4) — CONDITIONAL with no check failed: the measurement is incomplete, never a PASS."""
    if code != 4:
        return "PASS"
    assert verdict["measurement"] == "incomplete" and all(c["status"] != "FAIL" for c in verdict["checks"]), verdict
    return "CONDITIONAL"


def assert_exit(code: int, run_dir: Path, *expected: int, output: str = "") -> None:
    """`code` is one of `expected`, or 4 when the run in `run_dir` says the machine made it doubtful (saturated or
    frozen: a busy test machine) — with --sla the contract judges that saturation, and exits 4 on it too."""
    if code in expected or (code == 4 and machine_doubtful(run_dir)):
        return
    raise AssertionError(f"exit {code}, expected one of {list(expected)} (4: a busy machine)\n{output[-3000:]}")
