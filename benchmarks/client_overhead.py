"""How much does the harness add to what it measures?

Runs the real `locust` command (one process: what one worker does) against the simulator set to TTFT 100 ms,
ITL 10 ms, 128 tokens, no jitter, at several concurrencies, and compares measured TTFT and ITL with the injected
values. The error includes the loopback, the simulator's own scheduling and the client: an upper bound on the client's.

    python benchmarks/client_overhead.py [--levels 1,32,256,384,512] [--seconds 15]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slabench import metrics  # noqa: E402
from slabench.record import Outcome  # noqa: E402
from slabench.sinks import read_records  # noqa: E402

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
    subprocess.run(argv, cwd=ROOT, capture_output=True, check=True)
    records = [r for r in read_records(records_path) if r.outcome is Outcome.OK]
    start = min(r.sent for r in records)
    steady = [r for r in records if r.sent >= start + 3]  # skip the spawn ramp
    span = max(r.end for r in steady) - min(r.sent for r in steady)
    itl = [x for r in steady for x in metrics.itl(r)]
    return {
        "users": users,
        "requests": len(steady),
        "ttft_err_ms": (statistics.median(metrics.ttft(r) for r in steady) - TTFT) * 1000,
        "itl_err_ms": (statistics.median(itl) - ITL) * 1000,
        "itl_p99_err_ms": (sorted(itl)[int(0.99 * (len(itl) - 1))] - ITL) * 1000,
        "tokens_per_s": sum(r.completion_tokens for r in steady) / span,
    }


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
                    f"{r['tokens_per_s']:>8.0f} tok/s",
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
