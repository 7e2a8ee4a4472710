"""The planner's queue is the real-time simulator's queue: an open-loop burst, replayed by the real `locust` command
against the embedded simulator (a built-in GPU profile's vLLM capacity model, in wall time) while the run scrapes the
simulator's own `/metrics`, and the planner's replay of the same burst (the same profile and engine flags, in virtual
time) agree on `vllm:num_requests_waiting` within ±10 % through the burst.

What is compared, and why: the queue's area (request-seconds spent waiting: by Little's law the sum of every request's
wait for a batch slot, the figure a queue costs the SLA), its peak, and when it empties (from the first arrival). None
of the three depends on the phase of the scrape grid or on a constant offset between the load generator's and the
scraper's clocks, and the area and the drain are large against scheduling jitter (120 requests arrive in 2.4 s at a
batch of 8: about 90 waiting at the peak, for some 8 s). Any one instant on the steep rise (50 arrivals a
second) would test the scraper's timing more than the model, so instants are held to the queue's average: the mean
absolute gap between the two at the scrape instants, within 10 % of the mean queue.

The planner replays the requests as they reached the server (their `sent` times and the server's token counts), so
the comparison is the model's and not the load generator's. A run whose status says the machine starved it (its
`saturated`: the simulator's loop or the load generator ran late) measured the machine, and is skipped."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from slabench.core.sinks import read_records
from slabench.plan.chart_rule import chart_rule
from slabench.plan.scaling import scaled_replay
from slabench.plan.workload import Mix, PlannedLoad
from slabench.sim.profiles import EngineConfig, load_gpu_profile, load_model_profile
from tests.helpers.locust_run import assert_exit, run_locust

GPU, MODEL, MAX_NUM_SEQS, STREAM_INTERVAL = "rtx-pro-6000", "llama-3.2-3b", 8, 4
REQUESTS, EVERY_S, PROMPT, MAX_TOKENS = 120, 0.02, 600, 64
SCRAPE_S, TICK_S = 0.25, 0.05


def area(t: np.ndarray, waiting: np.ndarray) -> float:
    """Request-seconds waiting (trapezoids between samples)."""
    return float(np.sum((waiting[1:] + waiting[:-1]) / 2 * np.diff(t)))


def emptied(t: np.ndarray, waiting: np.ndarray) -> float:
    """The first sample after the last one with a queue."""
    busy = np.flatnonzero(waiting > 0)
    return float(t[busy[-1] + 1]) if len(busy) and busy[-1] + 1 < len(t) else float("inf")


def planned_queue(records: list) -> tuple[np.ndarray, np.ndarray]:
    """The planner's replay of the requests as sent: its fleet timeline (one replica, never scaled) sampled every
    TICK_S: (seconds since the first arrival, requests waiting)."""
    n = len(records)
    mix = Mix(
        prompt_tokens=np.array([r.prompt_tokens for r in records], dtype=np.int64),
        output_tokens=np.array([r.completion_tokens for r in records], dtype=np.int64),
        prefix_tokens=np.zeros(n, dtype=np.int64),  # every queue item its own prompt (cached_tokens 0)
        accounts=tuple(r.item_id for r in records),
        max_tokens=MAX_TOKENS,
        source="the burst's records",
    )
    sent = np.array([r.sent for r in records])
    load = PlannedLoad("burst", "the burst as sent", mix, offsets=sent - sent[0], rows=np.arange(n))
    gpu = load_gpu_profile(GPU)
    engine = gpu.engine.model_copy(update={"max_num_seqs": MAX_NUM_SEQS, "stream_interval": STREAM_INTERVAL})
    gpu = gpu.model_copy(update={"engine": engine})
    config = EngineConfig(gpu=gpu, model=load_model_profile(MODEL), options=engine)
    run = scaled_replay(config, load, chart_rule([]), 0.0, warm=1, tick_s=TICK_S, max_replicas=1)
    assert run.peak_replicas == 1 and run.prediction.ok == n
    return np.array(run.timeline.t), np.array(run.timeline.waiting)


def test_planned_queue_matches_the_simulators_metrics_through_a_burst(simulator, tmp_path: Path):
    url = simulator(
        "--profile", GPU, "--model-profile", MODEL,
        "--max-num-seqs", str(MAX_NUM_SEQS), "--stream-interval", str(STREAM_INTERVAL),
    )  # fmt: skip
    queue = tmp_path / "queue.csv"
    queue.write_text("offset_s\n" + "".join(f"{i * EVERY_S:.6f}\n" for i in range(REQUESTS)))
    run_dir = tmp_path / "run"
    res = run_locust(
        "-f", "locustfiles/chat_replay.py,shapes/burst.py", "--host", url,
        "--burst-queue", str(queue), "--prompt-tokens", str(PROMPT), "--max-tokens", str(MAX_TOKENS),
        "--records", str(run_dir / "records.jsonl"), "--server-metrics-interval", str(SCRAPE_S),
        timeout=180,
    )  # fmt: skip
    assert_exit(res.returncode, run_dir, 0, output=res.stderr)
    if json.loads((run_dir / "run_status.json").read_text()).get("saturated"):
        pytest.skip("the machine starved the run (run_status.json: saturated): it measured the machine, not the model")
    records = sorted(read_records(run_dir / "records.jsonl"), key=lambda r: r.sent)
    assert len(records) == REQUESTS and all(r.outcome == "ok" and r.cached_tokens == 0 for r in records)

    # the simulator's own gauge, on the first arrival's clock (wall_sent − sent: the record's wall/monotonic offset)
    first_wall = records[0].wall_sent
    scrapes = [json.loads(line) for line in (run_dir / "server_metrics.jsonl").read_text().splitlines()]
    sim_t = np.array([s["t"] - first_wall for s in scrapes])
    sim_w = np.array([s["gauges"].get("num_requests_waiting", 0.0) for s in scrapes])
    assert sim_t[0] < 0 and sim_w[0] == 0 and sim_w[-1] == 0  # the scrapes bracket the burst

    plan_t, plan_w = planned_queue(records)
    figures = {
        "area_request_s": (area(sim_t, sim_w), area(plan_t, plan_w)),
        "peak": (float(sim_w.max()), float(plan_w.max())),
        "emptied_s": (emptied(sim_t, sim_w), emptied(plan_t, plan_w)),
    }
    # and instant by instant: the planner's queue at each scrape's time, off by at most 10 % of the queue on average
    during = (sim_t >= 0) & (sim_t <= figures["emptied_s"][0])
    gap = np.abs(np.interp(sim_t[during], plan_t, plan_w) - sim_w[during]).mean() / sim_w[during].mean()
    print("num_requests_waiting (simulator's /metrics, planner):", figures, f"mean gap {gap:.1%}")
    assert figures["peak"][0] >= 50, figures  # a queue large against jitter, or the burst did not queue
    for name, (measured, planned) in figures.items():
        assert planned == pytest.approx(measured, rel=0.10), (name, figures)
    assert gap <= 0.10, (gap, np.column_stack([sim_t, sim_w, np.interp(sim_t, plan_t, plan_w)])[during].tolist())
