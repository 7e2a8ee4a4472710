"""Calibration of the simulator's vLLM capacity model, and the engine's own overhead.

1. Closed-loop step sweep in virtual time: N clients, each sending its next request the moment the previous one
   finishes, with the retail QA-grading workload's lengths sampled from a seeded distribution (docs/workload.md: input
   LogNormal with median ~2.8k and p99 ~6.4k tokens; output 80 + Σ over the account's rubric items of
   LogNormal(ln 55, 0.35), capped at max_tokens 2048). Nothing in the engine knows these numbers or the levels:
   where TTFT p95 jumps is whatever the KV-cache arithmetic and the scheduler make of them.
2. Engine overhead: wall time of `step()` with 1,000 running sequences (steps/s, emissions/s, µs per emission).

    python benchmarks/sim_calibration.py                      # default profiles and levels 1, 8, 16, 32, 64
    python benchmarks/sim_calibration.py --shared-prefix      # each account's prompts share its rubric prefix
    python benchmarks/sim_calibration.py --no-prefix-caching  # vLLM --no-enable-prefix-caching
    python benchmarks/sim_calibration.py --profiles l4 --levels 16,24,32 --no-overhead

Percentiles are nearest-rank over the requests sent inside the steady window (after every client's first request
finished, before any client sent its last); output tok/s counts the tokens streamed inside that window.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slabench.sim.engine import SimRequest
from slabench.sim.profiles import EngineConfig, load_profile
from slabench.sim.virtual import Trace, run_closed_loop
from slabench.sim.vllm_engine import VllmEngine

DEFAULT_PROFILES = ["l4", "a10g", "l40s", "rtx-pro-6000-mig-2g.48gb", "rtx-pro-6000"]
DEFAULT_LEVELS = [1, 8, 16, 32, 64]
MAX_TOKENS = 2048

# (account, share of the queue, rubric items) from docs/workload.md; the prefix is instructions + rubric + schema.
ACCOUNTS = [("A", 0.30, 22), ("B", 0.22, 14), ("C", 0.16, 12), ("D", 0.14, 18), ("E", 0.10, 20), ("F", 0.08, 26)]
INPUT_MEDIAN = 2800
INPUT_P99 = 6400
INPUT_SIGMA = math.log(INPUT_P99 / INPUT_MEDIAN) / 2.326  # z(0.99): LogNormal with that median and p99


@dataclass(frozen=True)
class Sample:
    account: str
    prompt_tokens: int
    output_tokens: int
    prefix_tokens: int


def sample_request(rng: random.Random) -> Sample:
    account, _, items = rng.choices(ACCOUNTS, weights=[a[1] for a in ACCOUNTS])[0]
    prefix = 350 + 55 * items + 150
    prompt = max(prefix + 100, round(rng.lognormvariate(math.log(INPUT_MEDIAN), INPUT_SIGMA)))
    output = 80 + sum(round(rng.lognormvariate(math.log(55), 0.35)) for _ in range(items))
    return Sample(account, prompt, min(output, MAX_TOKENS), prefix)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no data."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


@dataclass
class Row:
    profile: str
    concurrency: int
    requests: int
    ttft_p50: float | None
    ttft_p95: float | None
    itl_p50: float | None
    output_tps: float | None
    preemptions_per_request: float
    kv_tokens: int


def measure(cfg: EngineConfig, concurrency: int, seed: int, min_requests: int, shared_prefix: bool) -> Row:
    rng = random.Random(seed * 1_000_003 + concurrency)
    per_client = 3 + math.ceil(min_requests / concurrency)  # the first and last ones fall outside the window

    def make(client: int, k: int) -> SimRequest:
        s = sample_request(rng)
        return SimRequest(
            request_id=f"c{client}-{k}",
            prompt_tokens=s.prompt_tokens,
            max_tokens=MAX_TOKENS,
            target_tokens=s.output_tokens,
            prefix_key=f"account-{s.account}" if shared_prefix else None,
            prefix_tokens=s.prefix_tokens if shared_prefix else 0,
        )

    engine = VllmEngine(cfg, seed=seed)
    traces = run_closed_loop(engine, make, concurrency, per_client)
    by_client: dict[int, list[Trace]] = {}
    for tr in traces:
        by_client.setdefault(tr.client, []).append(tr)
    start = max(ts[0].e2e + ts[0].arrival for ts in by_client.values())  # every client past its first request
    end = min(ts[-1].arrival for ts in by_client.values())  # no client has sent its last one yet
    window = [tr for tr in traces if start <= tr.arrival < end]
    tokens = sum(n for tr in traces for t, n in zip(tr.chunk_times, tr.chunk_tokens, strict=True) if start <= t < end)
    itl = [g for tr in window for g in tr.itls()]
    return Row(
        profile=cfg.gpu.name,
        concurrency=concurrency,
        requests=len(window),
        ttft_p50=percentile([tr.ttft for tr in window], 50),
        ttft_p95=percentile([tr.ttft for tr in window], 95),
        itl_p50=percentile(itl, 50),
        output_tps=tokens / (end - start) if end > start else None,
        preemptions_per_request=engine.num_preemptions_total / len(traces),
        kv_tokens=cfg.kv_capacity_tokens,
    )


def _fmt(v: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "no data" if v is None else f"{v * scale:.{digits}f}"


def print_table(rows: list[Row]) -> None:
    print(
        "| profile | KV cache (tokens) | concurrency | requests | TTFT p50 (s) | TTFT p95 (s) | ITL p50 (ms) "
        "| output tok/s | preemptions/request |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r.profile} | {r.kv_tokens:,} | {r.concurrency} | {r.requests} | {_fmt(r.ttft_p50)} "
            f"| {_fmt(r.ttft_p95)} | {_fmt(r.itl_p50, 1000, 1)} | {_fmt(r.output_tps, 1, 0)} "
            f"| {r.preemptions_per_request:.2f} |"
        )


def workload_summary(seed: int, n: int = 20_000) -> str:
    rng = random.Random(seed)
    xs = [sample_request(rng) for _ in range(n)]
    p = [x.prompt_tokens for x in xs]
    o = [x.output_tokens for x in xs]
    mean_kv = statistics.fmean(a + b / 2 for a, b in zip(p, o, strict=True))
    return (
        f"workload (seed {seed}, {n} samples): input p50 {percentile(p, 50)} p99 {percentile(p, 99)}; "
        f"output p50 {percentile(o, 50)} mean {statistics.fmean(o):.0f}; mean KV tokens held by a running "
        f"request (prompt + half its output) ≈ {mean_kv:.0f}"
    )


def measure_overhead(running: int = 1000, steps: int = 300) -> dict[str, float]:
    """Wall-clock cost of `step()` while `running` sequences decode together (stream_interval 1)."""
    cfg = load_profile("rtx-pro-6000", engine={"max_num_seqs": 1024, "enable_prefix_caching": False})
    engine = VllmEngine(cfg)
    for i in range(running):
        engine.add(SimRequest(f"r{i}", 128, 4096, 4096, ignore_eos=True), 0.0)
    now = 0.0
    while engine.stats()["num_requests_waiting"] or engine.generation_tokens_total < running:
        now = engine.next_event_time()
        engine.step(now)
    emitted = 0
    t0 = time.perf_counter()
    for _ in range(steps):
        now = engine.next_event_time()
        emitted += len(engine.step(now).emissions)
    wall = time.perf_counter() - t0
    assert engine.stats()["num_requests_running"] == running, "the overhead run must keep every sequence running"
    return {
        "running": running,
        "steps_per_s": steps / wall,
        "emissions_per_s": emitted / wall,
        "us_per_emission": wall / emitted * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default=",".join(DEFAULT_PROFILES))
    ap.add_argument("--model", default="llama-3.1-8b-fp8")
    ap.add_argument("--levels", default=",".join(map(str, DEFAULT_LEVELS)))
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--min-requests", type=int, default=120, help="requests per level inside the steady window")
    ap.add_argument("--shared-prefix", action="store_true", help="prompts share their account's rubric prefix")
    ap.add_argument("--no-prefix-caching", action="store_true", help="as vLLM's --no-enable-prefix-caching")
    ap.add_argument("--no-overhead", action="store_true")
    args = ap.parse_args(argv)

    levels = [int(x) for x in args.levels.split(",")]
    print(f"# sim_calibration {date.today().isoformat()}: python benchmarks/sim_calibration.py {' '.join(argv or [])}")
    print(workload_summary(args.seed))
    caching = not args.no_prefix_caching
    shared = "prompts share their account's rubric prefix" if args.shared_prefix else "unique prompts"
    print(f"prefix caching {'on' if caching else 'off'}; {shared}")
    rows = []
    t0 = time.perf_counter()
    for name in args.profiles.split(","):
        cfg = load_profile(name, args.model, engine={"enable_prefix_caching": caching})
        s = cfg.summary()
        print(
            f"{name}: KV {s['kv_budget_gib']} GiB = {s['kv_capacity_tokens']:,} tokens, "
            f"max_num_seqs {s['max_num_seqs']}, max_num_batched_tokens {s['max_num_batched_tokens']}"
        )
        for n in levels:
            rows.append(measure(cfg, n, args.seed, args.min_requests, args.shared_prefix))
    print(f"(sweep simulated in {time.perf_counter() - t0:.1f} s of wall time)\n")
    print_table(rows)
    if not args.no_overhead:
        o = measure_overhead()
        print(
            f"\nengine overhead at {o['running']} running sequences: {o['steps_per_s']:.0f} steps/s, "
            f"{o['emissions_per_s']:,.0f} emissions/s, {o['us_per_emission']:.2f} µs per emission"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
