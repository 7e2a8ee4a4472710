"""Can one simulator process keep up? Streams N concurrent requests at it and counts the chunks it delivers.

The load generator is deliberately dumb (raw sockets, counts "data:" lines, no JSON) and runs in its own process, so
the simulator's core is what is measured. Reports chunks/s delivered, the simulator's CPU use, and CPU µs per chunk.

    python benchmarks/sim_throughput.py [--streams 1000] [--itl 0.033] [--seconds 15]
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


def load(port: int, streams: int, seconds: float, tokens: int) -> None:
    """Child process: keep `streams` requests in flight for `seconds`; print the number of chunks received."""
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
    end = 0.0
    count = [0]

    def one() -> None:
        while time.monotonic() < end:  # new requests until `seconds` have passed; the last ones run to the end
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(request)
                tail = b""
                while True:
                    data = s.recv(65536)
                    if not data:
                        break
                    count[0] += (tail + data).count(b"data: {")
                    tail = data[-8:]
                    if b"[DONE]" in data:
                        break

    print("ready", flush=True)
    sys.stdin.readline()  # the parent has taken its CPU snapshot
    start = time.monotonic()
    end = start + seconds
    gevent.joinall([gevent.spawn(one) for _ in range(streams)], timeout=seconds + 60)
    print(count[0], time.monotonic() - start, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=1000)
    ap.add_argument("--itl", type=float, default=0.033, help="seconds between tokens per stream")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        port, streams, seconds, tokens = args.child
        return load(int(port), int(streams), float(seconds), int(tokens))
    sim = subprocess.Popen(
        [sys.executable, "-m", "slabench", "simulate", "--port", "0", "--ttft", "0.01", "--itl", str(args.itl)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    port = int(sim.stdout.readline().rsplit(":", 1)[-1])
    ps = psutil.Process(sim.pid)
    argv = [sys.executable, __file__, "--child", str(port), str(args.streams), str(args.seconds), str(args.tokens)]
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    child.stdout.readline()  # "ready": imports done, nothing sent yet
    cpu0 = ps.cpu_times()
    child.stdin.write("go\n")
    child.stdin.flush()
    chunks_s, wall_s = child.stdout.readline().split()
    cpu1 = ps.cpu_times()
    sim.terminate()
    chunks, wall = int(chunks_s), float(wall_s)
    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    offered = args.streams / args.itl
    print(f"{args.streams} concurrent streams, offered {offered:,.0f} chunks/s for {args.seconds:g} s")
    print(
        f"delivered {chunks / wall:,.0f} chunks/s; simulator CPU {cpu / wall:.0%} of one core; "
        f"{cpu / chunks * 1e6:.1f} CPU µs per chunk → {chunks / cpu:,.0f} chunks per CPU-second"
    )


if __name__ == "__main__":
    main()
