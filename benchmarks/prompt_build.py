"""How fast a queue item's prompt is rebuilt from its seed (the issue asks for ≥ 2,000 prompts/s on one core).

Per prompt: `build_item(queue_item)` (regenerate transcript + ground truth from the seed) and
`build_messages(item, task)` (system prompt cached per account, transcript last). Runs in this one process, on one
core; reports the best of several rounds (the least disturbed by other load on the machine) and the median, as
wall-clock and as process CPU time.

    python benchmarks/prompt_build.py [--items 4000] [--rounds 5] [--task verbose] [--dir datasets]
"""

from __future__ import annotations

import argparse
import statistics
import time

from slabench.core.errors import UserError
from slabench.workload import build_item, build_messages, load_queue, load_settings, prompt_tokens
from slabench.workload.queue import build_queue


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--task", choices=("verbose", "terse"), default="verbose")
    ap.add_argument("--dir", default="datasets", help="dataset dir; falls back to an in-memory queue if absent")
    args = ap.parse_args()

    settings = load_settings()
    try:
        queue = load_queue(args.dir, "burst", settings)
        source = f"{args.dir}/queue_burst.csv"
    except UserError:  # no committed files: the benchmark still runs, on an in-memory queue
        queue = build_queue(settings, settings.seed, "burst")
        source = "in-memory burst queue"
    step = max(1, len(queue) // args.items)
    sample = queue[::step][: args.items]
    build_messages(build_item(sample[0]), args.task)  # warm the per-account system-prompt cache

    wall, cpu = [], []
    for _ in range(args.rounds):
        w0, c0 = time.perf_counter(), time.process_time()
        for q in sample:
            build_messages(build_item(q), args.task)
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)

    n = len(sample)
    tokens = [prompt_tokens(build_item(q), args.task) for q in sample[:500]]
    print(f"source: {source}; {n} items (every {step}th), task {args.task}, {args.rounds} rounds, one process")
    print(f"prompt tokens of the sample (estimate_tokens): median {statistics.median(tokens):,.0f}")
    print(f"wall: best {n / min(wall):,.0f} prompts/s, median {n / statistics.median(wall):,.0f} prompts/s")
    print(f"cpu:  best {n / min(cpu):,.0f} prompts/s, median {n / statistics.median(cpu):,.0f} prompts/s")
    print(f"per prompt (best round): {min(wall) / n * 1e6:,.0f} µs")


if __name__ == "__main__":
    main()
