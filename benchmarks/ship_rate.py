"""Does record shipping keep up? 500 requests/s (open loop, Poisson) from 4 worker processes to one master, against
the simulator with short answers, for a minute. Samples the master's memory every second and counts the records it
wrote against the simulator's count of requests received.

    python benchmarks/ship_rate.py [--rps 500] [--workers 4] [--seconds 60]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slabench.core.sinks import read_records  # noqa: E402
from tests.helpers.locust_run import scrape  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rps", type=float, default=500)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--seconds", type=int, default=60)
    args = ap.parse_args()
    sim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "slabench",
            "simulate",
            "--port",
            "0",
            "--ttft",
            "0.005",
            "--itl",
            "0.002",
            "--output-tokens",
            "8",
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    url = sim.stdout.readline().rsplit(" ", 1)[-1].strip()
    with tempfile.TemporaryDirectory() as tmp:
        records_path = Path(tmp) / "records.jsonl"
        argv = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            "locustfiles/chat_replay.py,shapes/rate.py",
            "--headless",
            "--only-summary",
            "--host",
            url,
            "--processes",
            str(args.workers),
            "--rate-rps",
            str(args.rps),
            "--rate-hold",
            str(args.seconds),
            "--prompt-tokens",
            "16",
            "--max-tokens",
            "8",
            "--records",
            str(records_path),
            "--spool-dir",
            str(Path(tmp) / "spool"),
        ]
        master = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ps = psutil.Process(master.pid)
        rss = []
        while master.poll() is None:
            try:
                rss.append(ps.memory_info().rss / 2**20)
            except psutil.NoSuchProcess:
                break
            time.sleep(1)
        err = master.stderr.read()
        records = read_records(records_path)
        received = scrape(url)["slabench_sim_requests_received_total"]
    sim.terminate()
    ok = sum(1 for r in records if r.outcome.value == "ok")
    lines = [line for line in err.splitlines() if "open loop" in line or "records →" in line]
    print("\n".join(lines))
    third = max(1, len(rss) // 3)
    print(
        f"{args.workers} workers, {args.rps:g} req/s for {args.seconds} s: {len(records):,} records "
        f"({ok:,} ok) for {received:,.0f} requests the server received; achieved {len(records) / args.seconds:,.0f} "
        f"records/s"
    )
    print(
        f"master RSS: first third mean {sum(rss[:third]) / third:.0f} MiB, last third mean "
        f"{sum(rss[-third:]) / third:.0f} MiB, peak {max(rss):.0f} MiB"
    )


if __name__ == "__main__":
    main()
