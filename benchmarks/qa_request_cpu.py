"""CPU per request of the QA-grading user, part by part: what one worker process spends on each call of the retail
burst (locustfiles/qa_grading.py under shapes/burst.py).

    python benchmarks/qa_request_cpu.py                 # 400 queue items, 40 at a time, verbose task
    python benchmarks/qa_request_cpu.py --items 1000 --concurrency 100 --task terse

Parts, measured in this one process with `time.process_time()` (CPU, not wall clock: steadier on a shared machine):

- prepare: rebuild the queue item's call from its seed and build the grading messages (`QAGradingUser.prepare_item`);
- body: the OpenAI request body and its JSON encoding (the long prompt);
- stream: send it and read the streamed answer with the real client (`StreamingClient.send`), against the simulator
  in its own process (grading mode: ~1,000 tokens of JSON answer, one SSE chunk per token, usage on every chunk);
- score: parse and score the answer (`score_answer(...).record_fields`) and put the fields on the record;
- record: what the worker does with a record (the live view's TTFT / mean ITL / TPOT, `to_dict`, its spool line).

The stream part runs `--concurrency` requests at once, as a busy worker does (per-chunk wake-ups included); the
others run one after another. Figures are µs of CPU per request; "total" is their sum.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gevent import monkey

monkey.patch_all()

import gevent  # noqa: E402
import gevent.pool  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from locustfiles.qa_grading import QAGradingUser  # noqa: E402
from slabench.core import metrics  # noqa: E402
from slabench.core.client import StreamingClient, Target, chat_body  # noqa: E402
from slabench.core.record import RecordMeta  # noqa: E402
from slabench.locust.openloop import OpenLoopItem  # noqa: E402
from slabench.sim.grading import user_tag  # noqa: E402
from slabench.workload import item_ref, load_settings, score_answer  # noqa: E402
from slabench.workload.queue import build_queue  # noqa: E402


class _Env:
    """What `prepare_item` reads from the Locust environment."""

    def __init__(self, task: str) -> None:
        self.parsed_options = argparse.Namespace(qa_task=task)


def start_simulator(output_tokens: int) -> tuple[subprocess.Popen, str]:
    argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", "--ttft", "0.05", "--itl", "0.01"]
    argv += ["--output-tokens", str(output_tokens)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline().strip()
    if not line.startswith("slabench simulator listening on "):
        proc.kill()
        raise SystemExit(f"simulator did not start: {line!r}")
    return proc, line.rsplit(" ", 1)[-1]


def cpu_us(fn, n: int) -> float:
    t = time.process_time()
    fn()
    return (time.process_time() - t) / n * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--items", type=int, default=400)
    p.add_argument("--concurrency", type=int, default=40)
    p.add_argument("--task", choices=("verbose", "terse"), default="verbose")
    p.add_argument("--rounds", type=int, default=3, help="repeat the pure parts; the median round is reported")
    a = p.parse_args()

    settings = load_settings()
    queue = build_queue(settings, settings.seed, "burst")[:: max(1, 20000 // a.items)][: a.items]
    items = [OpenLoopItem(q.index, q.offset_s, q.offset_s, q.account, None, q.seed, q.kind) for q in queue]
    env = _Env(a.task)
    n = len(items)
    max_tokens = settings.output.max_tokens

    def prepare_all():
        return [QAGradingUser.prepare_item(it, env) for it in items]

    prepared = prepare_all()
    prepare = statistics.median(cpu_us(prepare_all, n) for _ in range(a.rounds))
    bodies = [
        {
            **chat_body("slabench-sim", messages, max_tokens, user=user_tag(a.task, item_ref(call)), temperature=0),
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        for call, messages in prepared
    ]

    def encode_all():
        for b in bodies:
            json.dumps({**b, "stream": True}).encode()

    body = statistics.median(cpu_us(encode_all, n) for _ in range(a.rounds))

    sim, url = start_simulator(max_tokens)
    try:
        target = Target(base_url=url)
        clients = [StreamingClient(target) for _ in range(a.concurrency)]
        free = list(clients)
        replies: list = [None] * n

        def one(i: int) -> None:
            client = free.pop()
            try:
                replies[i] = client.send("chat", bodies[i], RecordMeta(run_id="bench", item_id=f"q{i}"))
            finally:
                free.append(client)

        pool = gevent.pool.Pool(a.concurrency)
        wall = time.perf_counter()
        stream = cpu_us(lambda: pool.map(one, range(n)), n)
        wall = time.perf_counter() - wall
        for c in clients:
            c.close()
    finally:
        sim.terminate()
        sim.wait(10)
    ok = [r for r in replies if r is not None and r.record.outcome == "ok"]
    tokens = statistics.median(r.record.completion_tokens or 0 for r in ok) if ok else 0

    def score_all():
        return [
            r.record.replace(**score_answer(r.text, call, a.task).record_fields(a.task))
            for r, (call, _) in zip(replies, prepared, strict=True)
        ]

    scored = score_all()
    score = statistics.median(cpu_us(score_all, n) for _ in range(a.rounds))

    def record_all():
        for r in scored:
            metrics.ttft(r), metrics.mean_itl(r), metrics.tpot(r)  # the live view's figures (fire_locust_events)
            row = r.to_dict()
            json.dumps(row, separators=(",", ":"))  # the spool line; the batch ships `row` itself (msgpack)

    record = statistics.median(cpu_us(record_all, n) for _ in range(a.rounds))
    parts = {"prepare": prepare, "body": body, "stream": stream, "score": score, "record": record}
    total = sum(parts.values())
    print(f"QA-grading user, task {a.task}: {n} queue items, {len(ok)} answered ok, median {tokens:.0f} tokens each")
    print(f"stream part: {a.concurrency} at a time, {wall:.1f} s wall")
    for name, v in parts.items():
        print(f"  {name:8s} {v:9,.0f} µs CPU per request ({v / total:5.1%})")
    print(f"  {'total':8s} {total:9,.0f} µs CPU per request  (~{1e6 / total:,.0f} requests per CPU-second)")
    if tokens:
        print(f"  stream per token: {stream / tokens:.1f} µs")
    return 0 if len(ok) == n else 1


if __name__ == "__main__":
    raise SystemExit(main())
