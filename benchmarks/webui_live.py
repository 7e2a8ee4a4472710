"""What the LLM tab costs the master: time to take one record, time for one snapshot, and memory, at a given rate.

    python benchmarks/webui_live.py --rate 500 --seconds 60 --tokens 256 --window-s 30

Synthetic records (one chunk per token, 10 ms apart) are fed as they would arrive at 500 req/s across all workers;
the snapshot is what /slabench/live.json and the tab's table compute (cached 1 s, so at most once a second).
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

from slabench.core.record import RequestRecord
from slabench.webui.live import LiveAggregator


def records(rate: float, seconds: float, tokens: int) -> list[RequestRecord]:
    out = []
    for i in range(int(rate * seconds)):
        sent = i / rate
        chunks = tuple(sent + 0.2 + k * 0.01 for k in range(tokens))
        out.append(
            RequestRecord(
                run_id="bench", request_id=f"q{i}", wall_sent=1e9 + sent, sent=sent, first_token=chunks[0],
                last_token=chunks[-1], chunk_times=chunks, end=chunks[-1] + 0.001, completion_tokens=tokens,
            )
        )  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--window-s", type=float, default=30.0)
    a = ap.parse_args()
    recs = records(a.rate, a.seconds, a.tokens)

    def feed() -> LiveAggregator:
        agg = LiveAggregator(window_s=a.window_s)
        agg.reset(started=1e9)
        for r in recs:
            agg.add(r, arrived=1e9 + r.end)
        return agg

    t0 = time.perf_counter()
    agg = feed()
    add_s = time.perf_counter() - t0
    snaps = 5
    t1 = time.perf_counter()
    for k in range(snaps):
        agg.snapshot(now=1e9 + a.seconds + k * 0.5)
    snap_s = (time.perf_counter() - t1) / snaps
    del agg
    tracemalloc.start()  # a second pass for memory: tracemalloc would distort the timings above
    agg = feed()
    agg.snapshot(now=1e9 + a.seconds)
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"{len(recs)} records × {a.tokens} tokens at {a.rate:g} req/s, window {a.window_s:g} s")
    print(f"add:      {add_s / len(recs) * 1e6:.1f} µs per record → {add_s / a.seconds * 100:.1f}% of one core")
    print(f"snapshot: {snap_s * 1000:.1f} ms each (cached 1 s: at most {snap_s * 100:.1f}% of one core)")
    print(f"memory:   {current / 2**20:.1f} MiB held after the run (peak {peak / 2**20:.1f} MiB, tracemalloc)")


if __name__ == "__main__":
    main()
