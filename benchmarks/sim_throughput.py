"""Can one simulator process keep up? Streams N concurrent requests at it and counts the chunks it delivers.

The load generator is deliberately dumb (raw sockets, counts "data:" lines, no JSON) and runs in its own process, so
the simulator's core is what is measured. Reports chunks/s delivered, the simulator's CPU use, and CPU µs per chunk.

    python benchmarks/sim_throughput.py [--streams 1000] [--itl 0.033] [--seconds 15] [--warmup 8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def load(port: int, streams: int, warmup: float, seconds: float, tokens: int) -> None:
    """Child process: keep `streams` requests in flight; after `warmup` seconds print the chunk count and time, and
    again `seconds` later (the parent reads the simulator's CPU at both marks); then stop."""
    from gevent import monkey

    monkey.patch_all()
    import socket

    import gevent

    body = json.dumps(
        {
            "model": "slabench-sim",
            "max_tokens": tokens,
            "stream": True,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": "hello"}],
        }
    ).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    count = [0]

    def one() -> None:
        while True:  # one request after another, each on a new connection
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(request)
                tail = b""
                while True:
                    data = s.recv(65536)
                    if not data:
                        break
                    count[0] += (tail + data).count(b"data: {")
                    tail = data[-6:]  # a "data: {" split across reads is counted once
                    if b"[DONE]" in data:
                        break

    print("ready", flush=True)
    sys.stdin.readline()  # the parent is ready to take its CPU snapshots
    # streams start spread over a second, as they would in a running service, not all in one step
    users = [gevent.spawn_later(i / streams, one) for i in range(streams)]
    for wait in (warmup, seconds):
        gevent.sleep(wait)
        print(count[0], time.monotonic(), flush=True)
        sys.stdin.readline()  # the parent took its snapshot
    gevent.killall(users, block=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--itl", type=float, default=0.033, help="seconds between tokens per stream")
    ap.add_argument("--ttft", type=float, default=0.01)
    ap.add_argument("--seconds", type=float, default=15, help="the measured window")
    ap.add_argument("--warmup", type=float, default=8, help="seconds before the window (every stream under way)")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        port, streams, warmup, seconds, tokens = args.child
        return load(int(port), int(streams), float(warmup), float(seconds), int(tokens))
    argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", "--ttft", str(args.ttft)]
    sim = subprocess.Popen([*argv, "--itl", str(args.itl)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    port = int(sim.stdout.readline().rsplit(":", 1)[-1])
    ps = psutil.Process(sim.pid)
    child_argv = [sys.executable, __file__, "--child", str(port), str(args.streams)]
    child_argv += [str(args.warmup), str(args.seconds), str(args.tokens)]
    child = subprocess.Popen(child_argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    child.stdout.readline()  # "ready": imports done, nothing sent yet
    marks = []
    child.stdin.write("go\n")
    child.stdin.flush()
    for _ in range(2):
        count, t = child.stdout.readline().split()
        cpu = ps.cpu_times()
        marks.append((int(count), float(t), cpu.user + cpu.system))
        child.stdin.write("next\n")
        child.stdin.flush()
    child.wait(30)
    sim.terminate()
    (c0, t0, cpu0), (c1, t1, cpu1) = marks
    chunks, wall, cpu = c1 - c0, t1 - t0, cpu1 - cpu0
    # steady state: each stream spends ttft + (tokens − 1)·itl per request of tokens + 1 chunks (the first chunk of a
    # chat stream is vLLM's role-only delta, which the load generator counts too)
    offered = args.streams * (args.tokens + 1) / (args.ttft + (args.tokens - 1) * args.itl)
    print(f"{args.streams} concurrent streams, offered {offered:,.0f} chunks/s; measured {wall:.1f} s in steady state")
    print(
        f"delivered {chunks / wall:,.0f} chunks/s ({chunks / wall / offered:.1%} of offered); simulator CPU "
        f"{cpu / wall:.0%} of one core; {cpu / chunks * 1e6:.1f} CPU µs per chunk → {chunks / cpu:,.0f} chunks per "
        "CPU-second"
    )


if __name__ == "__main__":
    main()
