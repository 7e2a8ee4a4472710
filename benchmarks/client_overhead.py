"""How much does the harness add to what it measures?

Runs the real `locust` command (one process: what one worker does) against the simulator set to TTFT 100 ms,
ITL 10 ms, 128 tokens, no jitter, at several concurrencies, and compares measured TTFT and ITL with the injected
values. The error includes the loopback, the simulator's own scheduling and the client: an upper bound on the client's.
It also reports the Locust process's CPU time per request and per streamed token over the steady window (sampled
with psutil, so Locust's start-up and the server-metrics poller are left out): the client's cost, steadier than the
wall-clock figures on a shared machine.

    python benchmarks/client_overhead.py [--levels 1,32,256,384,512] [--seconds 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slabench.core import metrics  # noqa: E402
from slabench.core.record import Outcome  # noqa: E402
from slabench.core.sinks import read_records  # noqa: E402

TTFT, ITL, TOKENS = 0.100, 0.010, 128


def start_simulator() -> tuple[subprocess.Popen, str]:
    argv = [
        sys.executable,
        "-m",
        "slabench",
        "simulate",
        "--port",
        "0",
        "--ttft",
        str(TTFT),
        "--itl",
        str(ITL),
        "--output-tokens",
        str(TOKENS),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    return proc, proc.stdout.readline().strip().rsplit(" ", 1)[-1]


def run_level(url: str, users: int, seconds: int, out: Path) -> dict:
    records_path = out / f"records-{users}.jsonl"
    argv = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(ROOT / "locustfiles" / "chat_replay.py"),
        "--headless",
        "--only-summary",
        "--host",
        url,
        "-u",
        str(users),
        "-r",
        str(max(users, 1)),
        "-t",
        f"{seconds}s",
        "--max-tokens",
        str(TOKENS),
        "--prompt-tokens",
        "64",
        "--records",
        str(records_path),
        "--stop-timeout",
        "5",
    ]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    cpu_marks = _cpu_marks(psutil.Process(proc.pid), (STEADY_AFTER_S + 2, seconds))  # the run ends later: start-up
    _, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"locust exited {proc.returncode}: {err.decode()[-2000:]}")
    records = [r for r in read_records(records_path) if r.outcome is Outcome.OK]
    start = min(r.sent for r in records)
    steady = [r for r in records if r.sent >= start + STEADY_AFTER_S]  # skip the spawn ramp
    (w0, c0), (w1, c1) = cpu_marks
    ended = [r for r in records if w0 <= r.wall_sent + (r.end - r.sent) < w1]  # requests finished between the marks
    span = max(r.end for r in steady) - min(r.sent for r in steady)
    itl = [x for r in steady for x in metrics.itl(r)]
    return {
        "users": users,
        "requests": len(steady),
        "ttft_err_ms": (statistics.median(metrics.ttft(r) for r in steady) - TTFT) * 1000,
        "itl_err_ms": (statistics.median(itl) - ITL) * 1000,
        "itl_p99_err_ms": (sorted(itl)[int(0.99 * (len(itl) - 1))] - ITL) * 1000,
        "tokens_per_s": sum(r.completion_tokens for r in steady) / span,
        "cpu_us_per_request": (c1 - c0) / max(len(ended), 1) * 1e6,
        "cpu_us_per_token": (c1 - c0) / max(sum(r.completion_tokens for r in ended), 1) * 1e6,
    }


STEADY_AFTER_S = 3


def _cpu_marks(proc: psutil.Process, at: tuple[float, float]) -> list[tuple[float, float]]:
    """(wall time, CPU seconds of `proc`) at `at` seconds after now: the steady window's two ends."""
    t0, marks = time.time(), []
    for offset in at:
        time.sleep(max(0.0, t0 + offset - time.time()))
        cpu = proc.cpu_times()
        marks.append((time.time(), cpu.user + cpu.system))
    return marks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="1,32,256,384,512")
    ap.add_argument("--seconds", type=int, default=15)
    args = ap.parse_args()
    proc, url = start_simulator()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for users in map(int, args.levels.split(",")):
                rows.append(run_level(url, users, args.seconds, Path(tmp)))
                r = rows[-1]
                print(
                    f"{r['users']:>5} users  {r['requests']:>6} req  TTFT err {r['ttft_err_ms']:+7.2f} ms  "
                    f"ITL err median {r['itl_err_ms']:+6.3f} ms  p99 {r['itl_p99_err_ms']:+7.2f} ms  "
                    f"{r['tokens_per_s']:>8.0f} tok/s  CPU {r['cpu_us_per_request']:>6.0f} µs/req "
                    f"{r['cpu_us_per_token']:>5.1f} µs/token",
                    flush=True,
                )
    finally:
        proc.terminate()
    good = [r for r in rows if abs(r["itl_err_ms"]) < 1.0]
    if good:
        best = max(good, key=lambda r: r["tokens_per_s"])
        print(
            f"highest streamed-token rate with median ITL error < 1 ms: {best['tokens_per_s']:.0f} tok/s "
            f"at {best['users']} users"
        )


if __name__ == "__main__":
    main()
