"""Benchmark: publish and hydrate a synthetic model through a local S3 API (moto server on 127.0.0.1).

    python benchmarks/weights_hydrate.py [--size-gb 1] [--shards 4] [--concurrency 16] [--chunk-size 32MB]

Prints publish and cold-hydrate throughput (MB/s), the no-op hydrate time (whole process, and the call alone),
and the time of a full `--verify` re-hash. Everything it writes (model, cache) lives in one temporary directory that
is deleted at the end, and the S3 server is stopped (its objects go with it).

What the figures mean: moto is a single Python process serving S3 over HTTP on loopback, so the cold-hydrate MB/s
here is bound by moto's CPU, not by slabench or a network; in-region S3 on an EKS node is typically much faster.
The no-op figure is the one that matters for every pod restart and does not depend on S3 at all.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slabench.weights.hydrate import hydrate  # noqa: E402
from slabench.weights.s3 import parse_s3_url, parse_size  # noqa: E402
from tests.helpers.moto_server import MotoServer  # noqa: E402

MB = 1_000_000


def write_synthetic_model(root: Path, total_bytes: int, shards: int) -> None:
    """Shards of random bytes (incompressible, like real weights) plus the small files a model directory has."""
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32}')
    (root / "tokenizer.json").write_bytes(os.urandom(2 * MB))
    per_shard = total_bytes // shards
    block = 16 * MB
    for i in range(1, shards + 1):
        with open(root / f"model-{i:05d}-of-{shards:05d}.safetensors", "wb") as f:
            left = per_shard
            while left > 0:
                f.write(os.urandom(min(block, left)))
                left -= block


def cli(server: MotoServer, *args: str) -> tuple[float, str]:
    env = {**os.environ, **server.env(), "PYTHONPATH": str(REPO)}
    started = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "slabench", "weights", *args], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if r.returncode != 0:
        raise SystemExit(f"command failed ({r.returncode}): {' '.join(args)}\n{r.stdout}{r.stderr}")
    return elapsed, r.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--concurrency", default="16")
    ap.add_argument("--chunk-size", default="32MB")
    ap.add_argument("--noop-runs", type=int, default=5)
    args = ap.parse_args()
    total = int(args.size_gb * 1000 * MB)
    transfer = ("--concurrency", args.concurrency, "--chunk-size", args.chunk_size, "--progress", "none")

    work = Path(tempfile.mkdtemp(prefix="slabench-weights-bench-"))
    try:
        with MotoServer() as server:
            os.environ.update(server.env())
            import boto3

            boto3.session.Session().client("s3").create_bucket(Bucket="bench-weights")
            print(f"synthetic model: {args.size_gb:g} GB in {args.shards} shards → {work}")
            t = time.perf_counter()
            write_synthetic_model(work / "snap", total, args.shards)
            model_bytes = sum(p.stat().st_size for p in (work / "snap").iterdir())
            print(f"  generated {model_bytes / MB:.0f} MB in {time.perf_counter() - t:.1f} s")

            secs, _ = cli(
                server,
                *("publish", "--from", str(work / "snap"), "--to", "s3://bench-weights/models"),
                *("--model", "bench/synthetic", "--revision", "v1", *transfer),
            )
            print(f"publish (hash + upload), whole process: {secs:.1f} s = {model_bytes / MB / secs:.0f} MB/s")
            shutil.rmtree(work / "snap")  # keep the disk tidy: the source copy is no longer needed

            source = "s3://bench-weights/models/bench/synthetic/v1"
            dest = work / "nvme" / "models" / "bench" / "synthetic" / "v1"
            secs, out = cli(server, "hydrate", "--source", source, "--dest", str(dest), *transfer)
            inner = re.search(r"complete in ([\d.]+) s: .* at ([\d.]+) MB/s", out)
            inside = f" (inside: {inner[1]} s, {inner[2]} MB/s)" if inner else ""
            rate = model_bytes / MB / secs
            print(f"cold hydrate (download + sha256 + fsync), whole process: {secs:.1f} s = {rate:.0f} MB/s{inside}")

            noop = []
            for _ in range(args.noop_runs):
                secs, out = cli(server, "hydrate", "--source", source, "--dest", str(dest))
                assert "already complete" in out, out
                noop.append(secs)
            print(
                f"no-op hydrate, whole process (python start + imports + marker + stat), {args.noop_runs} runs: "
                f"median {statistics.median(noop) * 1000:.0f} ms, min {min(noop) * 1000:.0f} ms"
            )
            calls = []
            for _ in range(20):
                t = time.perf_counter()
                r = hydrate(parse_s3_url(source), dest, progress="none", say=lambda _: None)
                calls.append(time.perf_counter() - t)
                assert r.noop
            print(f"no-op hydrate, the call alone, 20 runs: median {statistics.median(calls) * 1e6:.0f} µs")

            secs, _ = cli(server, "hydrate", "--source", source, "--dest", str(dest), "--verify")
            print(f"hydrate --verify (re-hash {model_bytes / MB:.0f} MB, nothing fetched): {secs:.1f} s")
            chunk = parse_size(args.chunk_size)
            print(f"settings: --concurrency {args.concurrency} --chunk-size {args.chunk_size} ({chunk} B)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        print(f"cleaned up {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
