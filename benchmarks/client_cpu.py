"""CPU time the streaming client spends per request and per streamed token, without Locust around it.

Starts the simulator (its own process; TTFT 20 ms, `--itl` between tokens, `--tokens` tokens, no jitter), then
runs `--streams` greenlets in this process, each sending requests back to back with its own `StreamingClient` for
`--seconds`, and reads this process's CPU time (`getrusage`, user + system) around the steady part, and how much of
it went to threads other than the event loop's (the arrival watcher).

    python benchmarks/client_cpu.py [--streams 32] [--tokens 128] [--seconds 10] [--itl 0.001] [--arrival-clock loop]

CPU time is the steady figure on a shared machine, but it still moves ±15 % between runs. `--against REV` compares
this checkout's client with the one of git revision REV (`git archive`, the same simulator for both): `--pairs` runs
of each, in alternating order (ABBA), and prints each pair's ratio, their median and a bootstrap 95 % interval.

    python benchmarks/client_cpu.py --streams 256 --tokens 32 --seconds 6 --itl 0.02 --against 16d095c --pairs 8

At 1 ms between tokens one wake-up of the client reads many streams' events; at `--itl 0.01` (a GPU server's pace)
nearly every event is its own wake-up, whose cost then dominates.
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_SELF)
    return u.ru_utime + u.ru_stime


def measure(a: argparse.Namespace) -> dict:
    """One run of the client found under `a.code`: requests, tokens and CPU seconds in the window."""
    sys.path.insert(0, str(a.code))
    from slabench.core.client import StreamingClient, Target, chat_body
    from slabench.core.record import RecordMeta

    argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", "--ttft", "0.02", "--itl", str(a.itl)]
    argv += ["--output-tokens", str(a.tokens)]
    sim = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)  # this checkout's simulator
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
        window["start"], c0, m0 = time.monotonic(), cpu(), time.thread_time()  # (greenlets share the main thread)
        gevent.sleep(a.seconds)
        window["stop"], c1, m1 = time.monotonic(), cpu(), time.thread_time()
        gevent.joinall(users, timeout=30)
    finally:
        sim.terminate()
    ok = [r for r in done if r.outcome == "ok"]
    bad = next((r for r in done if r.outcome != "ok"), None)
    return {
        "code": str(Path(sys.modules["slabench"].__file__).parents[1]),
        "requests": len(done),
        "ok": len(ok),
        "tokens": sum(r.completion_tokens for r in ok),
        "cpu_s": c1 - c0,
        "other_threads_s": max(0.0, (c1 - c0) - (m1 - m0)),
        "failure": None if bad is None else f"{bad.error_category}: {bad.error_message}",
    }


def line(a: argparse.Namespace, m: dict) -> str:
    per_request = m["cpu_s"] / max(m["requests"], 1) * 1e6
    others = m["other_threads_s"] / max(m["cpu_s"], 1e-9)
    fail = f"{m['requests'] - m['ok']} failed, e.g. {m['failure']}\n" if m["failure"] else ""
    return (
        f"{fail}{a.arrival_clock}: {a.streams} streams × {a.tokens} tokens, {a.seconds:g} s: "
        f"{m['requests']} requests ({m['ok']} ok), {m['tokens'] / a.seconds:,.0f} tokens/s; client CPU "
        f"{m['cpu_s']:.2f} s = {per_request:,.0f} µs per request (other threads {others:.1%}), "
        f"{m['cpu_s'] / max(m['tokens'], 1) * 1e6:.2f} µs per token"
    )


def compare(a: argparse.Namespace, passed: list[str]) -> None:
    """`--pairs` runs of this checkout and of `a.against`, each in its own process, in ABBA order."""
    with tempfile.TemporaryDirectory() as other:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", a.against, "slabench"], capture_output=True)
        if archive.returncode:
            sys.exit(f"client_cpu.py: --against {a.against}: {archive.stderr.decode().strip()}")
        subprocess.run(["tar", "-x", "-C", other], input=archive.stdout, check=True)
        trees = {"this": str(ROOT), a.against: other}
        per_request: dict[str, list[float]] = {name: [] for name in trees}
        print(f"{'pair':>4}  {'client':<12}{'requests':>9}{'µs/request':>12}{'other threads':>15}")
        for i in range(a.pairs):
            order = list(trees) if i % 4 in (0, 3) else list(trees)[::-1]  # ABBA: a drift weighs on both alike
            for name in order:
                out = subprocess.run(
                    [sys.executable, __file__, *passed, "--code", trees[name], "--json"],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                m = json.loads(out.stdout.splitlines()[-1])
                if m["code"] != str(Path(trees[name]).resolve()):
                    sys.exit(f"client_cpu.py: the run of {name} imported slabench from {m['code']}")
                if m["failure"]:
                    print(f"      {m['requests'] - m['ok']} failed, e.g. {m['failure']}")
                per_request[name].append(m["cpu_s"] / max(m["requests"], 1))
                others = m["other_threads_s"] / max(m["cpu_s"], 1e-9)
                row = f"{i + 1:>4}  {name[:12]:<12}{m['requests']:>9,}"
                print(f"{row}{per_request[name][-1] * 1e6:>12,.0f}{others:>15.1%}")
    ratios = np.array(per_request["this"]) / np.array(per_request[a.against])
    boot = np.median(np.random.default_rng(0).choice(ratios, (10_000, len(ratios))), axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    print(f"CPU per request, this ÷ {a.against[:12]}: pairs {', '.join(f'{r:.2f}' for r in ratios)}")
    print(f"median {np.median(ratios):.3f} (95 % interval {low:.3f}–{high:.3f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--itl", type=float, default=0.001, help="seconds between tokens")
    ap.add_argument("--arrival-clock", choices=["kernel", "loop"], default="kernel", help="as the Locust option")
    ap.add_argument("--against", metavar="REV", help="compare with the client of this git revision")
    ap.add_argument("--pairs", type=int, default=6, help="with --against: runs of each")
    ap.add_argument("--code", type=Path, default=ROOT, help=argparse.SUPPRESS)  # (--against's runs)
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.pairs < 1:
        ap.error(f"--pairs {a.pairs}: give 1 or more")
    if a.against:
        same = ("streams", "tokens", "seconds", "warmup", "itl", "arrival_clock")
        compare(a, [f"--{name.replace('_', '-')}={getattr(a, name)}" for name in same])
        return
    m = measure(a)
    print(json.dumps(m) if a.json else line(a, m))


if __name__ == "__main__":
    main()
