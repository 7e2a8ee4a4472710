"""A public trace replayed by the real `locust` command (chat replay + the burst shape) against the simulator's vLLM
model: one record per trace row at its offset, each prompt the trace's length as the server counts it, each answer
capped at the trace's output length, and requests that share Mooncake blocks hit the server's prefix cache; `slabench
plan` reads the same trace."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from slabench.core.queue import read_queue_file
from slabench.core.sinks import read_records
from tests.helpers.locust_run import assert_exit, run_locust, scrape
from tests.integration.test_plan_cli import files, slabench

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"


def test_a_mooncake_trace_replays_its_lengths_and_shared_prefixes(simulator, tmp_path):
    url = simulator("--profile", "l4", "--model-profile", "llama-3.2-3b")
    trace = TRACES / "mooncake.jsonl"
    rows = {r.item_id: r for r in read_queue_file(trace)}
    records_path = tmp_path / "records.jsonl"
    res = run_locust(
        "-f", "locustfiles/chat_replay.py,shapes/burst.py", "--host", url, "--burst-queue", str(trace),
        "--ignore-eos", "--records", str(records_path), timeout=120,
    )  # fmt: skip
    assert_exit(res.returncode, records_path.parent, 0, output=res.stderr)
    assert "8 of 8 queued requests from" in res.stderr
    records = read_records(records_path)
    assert Counter(r.item_id for r in records) == Counter(rows.keys())  # each row once
    for r in records:
        row = rows[r.item_id]
        assert r.completion_tokens == row.output_tokens  # max_tokens = the trace's output length (--ignore-eos)
        # the server's count of the prompt: the trace's length, to within the chat template the sizer learns
        assert abs(r.prompt_tokens - row.prompt_tokens) <= 0.05 * row.prompt_tokens, (r.item_id, r.prompt_tokens)
    # rows 0, 1, 3, 5 and 7 share blocks 0 and 1, rows 2 and 6 block 4: the later ones find them cached
    assert scrape(url)["vllm:prefix_cache_hits_total"] > 0


def test_plan_replays_a_trace_with_its_shared_prefixes(tmp_path):
    gpu, model, sla, _ = files(tmp_path, "  ttft_p95_s: {max: 30}\n")
    out = tmp_path / "plan"
    trace = TRACES / "burstgpt.csv"
    r = slabench("--profiles", gpu, "--model", model, "--sla", sla, "--queue", str(trace), "--price", "toy1=2",
                 "--queue-window", "100:", "--out", str(out))  # fmt: skip
    assert r.returncode in (0, 2), r.stderr
    doc = json.loads((out / "plan.json").read_text())
    assert "4 requests" in json.dumps(doc)  # the window from 100 s keeps the last four of five usable rows
    bad = slabench(
        "--profiles",
        gpu,
        "--model",
        model,
        "--sla",
        sla,
        "--queue",
        str(trace),
        "--queue-format",
        "azure",
        "--price",
        "toy1=2",
    )
    assert bad.returncode == 3 and "burstgpt.csv:1: header: no TIMESTAMP" in bad.stderr
