"""How fast `slabench.analysis.aggregate.aggregate` is on a big sweep: 8 levels × 5 repeats × 5,000 records.

    python benchmarks/aggregate_speed.py                 # both formats, 128 output tokens per request
    python benchmarks/aggregate_speed.py --tokens 256 --format jsonl

Records look like the real ones: 128 content chunks each with their arrival times and per-chunk token counts
(continuous_usage_stats), server-reported usage, 1 % errors. The data is generated first (not timed); then each
aggregation runs in a fresh Python process, which reports its wall time and peak resident memory (ru_maxrss), so
the figures include reading the files, the imports and the per-request arrays — everything a user waits for.
Target (issue 5): under 3 s and under 1 GB on the 2-core development machine.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slabench.core.schema import RECORD, SWEEP_RUN  # noqa: E402 (after the path insert)

WALL0 = 1_700_000_000.0


def make_run(level: int, repeat: int, n: int, tokens: int, rng: random.Random) -> list[dict]:
    rows = []
    t = 1000.0 + repeat * 100
    itl = 0.01 * (1 + level / 16)
    for i in range(n):
        sent = t + i * 0.02
        ok = rng.random() > 0.01
        first = sent + 0.1 * (1 + level / 8) * rng.uniform(0.8, 1.2)
        times = [first]
        for _ in range(tokens - 1):
            times.append(times[-1] + itl * rng.uniform(0.7, 1.3))
        rows.append(
            {
                "run_id": f"bench-L{level}-r{repeat}",
                "request_id": f"{level}-{repeat}-{i}",
                "worker_id": "local",
                "user_id": f"local/{i % level}",
                "stage_level": level,
                "stage_repeat": repeat,
                "endpoint": "chat",
                "model": "bench",
                "wall_sent": WALL0 + sent,
                "sent": sent,
                "first_byte": first - 0.001,
                "first_token": first if ok else None,
                "last_token": times[-1] if ok else None,
                "end": times[-1] + 0.001 if ok else sent + 0.05,
                "chunk_times": times if ok else [],
                "chunk_tokens": [1] * tokens if ok else None,
                "prompt_tokens": 512,
                "completion_tokens": tokens if ok else None,
                "token_source": "server",
                "max_tokens": tokens,
                "finish_reason": "length" if ok else None,
                "outcome": "ok" if ok else "error",
                "error_category": None if ok else "http_5xx",
                "http_status": 200 if ok else 503,
                **RECORD.stamp(),
            }
        )
    return rows


def generate(root: Path, fmt: str, levels: int, repeats: int, n: int, tokens: int) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from slabench.core.sinks import ARROW_SCHEMA

    rng = random.Random(1)
    size = 0
    for li in range(levels):
        level = 2**li
        for repeat in range(1, repeats + 1):
            d = root / str(level) / str(repeat)
            d.mkdir(parents=True)
            rows = make_run(level, repeat, n, tokens, rng)
            if fmt == "jsonl":
                p = d / "records.jsonl"
                with p.open("w") as f:
                    for r in rows:
                        f.write(json.dumps(r, separators=(",", ":")) + "\n")
                size += p.stat().st_size
            else:
                p = d / "records.parquet"
                p.mkdir()
                pq.write_table(pa.Table.from_pylist(rows, schema=ARROW_SCHEMA), p / "part-00000.parquet")
                size += sum(f.stat().st_size for f in p.iterdir())
            manifest = {**SWEEP_RUN.stamp(), "status": "complete", "warmup_s": 5.0}
            (d / "manifest.json").write_text(json.dumps(manifest))
    return size


def measure(root: str) -> None:
    """Child process: aggregate once, print {"seconds", "peak_mib", "levels"} as JSON."""
    t0 = time.perf_counter()
    from slabench.analysis.aggregate import aggregate, summary_json

    summary = aggregate(root, slo={"ttft_s": 0.5, "tpot_s": 0.05})
    summary_json(summary)
    seconds = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    peak = usage.ru_maxrss / 1024  # KiB on Linux
    cpu = usage.ru_utime + usage.ru_stime  # all threads; with the wall time it shows how busy the machine was
    requests = sum(lv.requests for lv in summary.levels)
    print(json.dumps({"seconds": seconds, "cpu_s": cpu, "peak_mib": peak, "requests": requests}))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--records", type=int, default=5000, help="records per run")
    ap.add_argument("--tokens", type=int, default=128, help="output tokens (content chunks) per request")
    ap.add_argument("--format", choices=["jsonl", "parquet", "both"], default="both")
    ap.add_argument("--rounds", type=int, default=3, help="aggregations per format (the best and worst are shown)")
    ap.add_argument("--measure", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.measure:
        measure(a.measure)
        return 0
    fmts = ["jsonl", "parquet"] if a.format == "both" else [a.format]
    total = a.levels * a.repeats * a.records
    print(
        f"{a.levels} levels × {a.repeats} repeats × {a.records:,} records = {total:,} records, {a.tokens} tokens each"
    )
    for fmt in fmts:
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            size = generate(Path(tmp), fmt, a.levels, a.repeats, a.records, a.tokens)
            print(f"{fmt}: generated {size / 2**20:,.0f} MiB in {time.perf_counter() - t0:.0f} s")
            results = []
            for _ in range(a.rounds):
                out = subprocess.run(
                    [sys.executable, __file__, "--measure", tmp], capture_output=True, text=True, check=True, cwd=ROOT
                )
                results.append(json.loads(out.stdout))
            secs = sorted(r["seconds"] for r in results)
            cpu = min(r["cpu_s"] for r in results)
            peak = max(r["peak_mib"] for r in results)
            print(
                f"{fmt}: aggregate {results[0]['requests']:,} counted requests: wall {secs[0]:.2f} s best, "
                f"{secs[-1]:.2f} s worst of {a.rounds}; CPU {cpu:.2f} s; peak RSS {peak:,.0f} MiB"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
