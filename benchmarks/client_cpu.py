"""CPU time the streaming client spends per request and per streamed token, without Locust around it.

Starts the simulator (its own process; TTFT 20 ms, `--itl` between tokens, `--tokens` tokens, no jitter), then
runs `--streams` greenlets in this process, each sending requests back to back with its own `StreamingClient` for
`--seconds`, and reads this process's CPU time (`getrusage`, user + system) around the steady part. CPU time is the
steady figure on a shared machine; compare two versions of the client in the same conditions (e.g. alternating runs).

    python benchmarks/client_cpu.py [--streams 32] [--tokens 128] [--seconds 10] [--itl 0.001] [--arrival-clock loop]

At 1 ms between tokens one wake-up of the client reads many streams' events; at `--itl 0.01` (a GPU server's pace)
nearly every event is its own wake-up, whose cost then dominates.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slabench.core.client import StreamingClient, Target, chat_body  # noqa: E402
from slabench.core.record import RecordMeta  # noqa: E402


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--itl", type=float, default=0.001, help="seconds between tokens")
    ap.add_argument("--arrival-clock", choices=["kernel", "loop"], default="kernel", help="as the Locust option")
    a = ap.parse_args()
    argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", "--ttft", "0.02", "--itl", str(a.itl)]
    argv += ["--output-tokens", str(a.tokens)]
    sim = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    url = sim.stdout.readline().strip().rsplit(" ", 1)[-1]
    window: dict[str, float] = {}
    done: list = []

    def user() -> None:
        client = StreamingClient(Target(url, kernel_stamps=a.arrival_clock == "kernel"))
        body = chat_body("slabench-sim", [{"role": "user", "content": "hello " * 16}], a.tokens)
        while "stop" not in window:
            r = client.send("chat", body, RecordMeta("bench")).record
            if "start" in window and "stop" not in window:
                done.append(r)
        client.close()

    try:
        users = [gevent.spawn(user) for _ in range(a.streams)]
        gevent.sleep(a.warmup)
        window["start"], c0 = time.monotonic(), cpu()
        gevent.sleep(a.seconds)
        window["stop"], c1 = time.monotonic(), cpu()
        gevent.joinall(users, timeout=30)
    finally:
        sim.terminate()
    ok = [r for r in done if r.outcome == "ok"]
    if len(ok) < len(done):
        bad = next(r for r in done if r.outcome != "ok")
        print(f"{len(done) - len(ok)} failed, e.g. {bad.error_category}: {bad.error_message}")
    tokens = sum(r.completion_tokens for r in ok)
    spent = c1 - c0
    print(
        f"{a.arrival_clock}: {a.streams} streams × {a.tokens} tokens, {a.seconds:g} s: "
        f"{len(done)} requests ({len(ok)} ok), "
        f"{tokens / a.seconds:,.0f} tokens/s; client CPU {spent:.2f} s = {spent / max(len(done), 1) * 1e6:,.0f} µs "
        f"per request, {spent / max(tokens, 1) * 1e6:.2f} µs per token"
    )


if __name__ == "__main__":
    main()
