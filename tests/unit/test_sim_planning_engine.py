"""`PlanningEngine` is `VllmEngine` with faster books: on any workload both must give the same requests the same
lives — timings, counters, stream chunks — and the token gaps must be the per-token gaps a client sees. Stretches of
plain steps are summed in closed form, so times agree to rounding (1e-9 relative), not bit for bit."""

from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import math
import random

import pytest

from slabench.sim.engine import SimRequest
from slabench.sim.profiles import load_profile
from slabench.sim.vllm_engine import VllmEngine
from slabench.sim.vllm_fast import PlanningEngine


class Gaps:
    def __init__(self) -> None:
        self.values: list[float] = []

    def add(self, gap: float, count: int) -> None:
        self.values += [gap] * count

    def add_series(self, first: float, step: float, length: int, count: int) -> None:
        for i in range(length):
            self.values += [first + i * step] * count


def close(a, b) -> bool:
    """Equal, floats to 1e-9 relative (recursively through dataclasses, dicts, lists, tuples)."""
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        return type(a) is type(b) and close(dataclasses.astuple(a), dataclasses.astuple(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def workload(seed: int, n: int, rate: float) -> list[tuple[float, SimRequest]]:
    """Poisson arrivals; prompts 1..3000 tokens, most sharing one of three prefixes; some ignore EOS."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for i in range(n):
        t += rng.expovariate(rate)
        prompt = rng.randint(1, 3000)
        key = rng.choice("ABC") if rng.random() < 0.7 else None
        out.append(
            (
                t,
                SimRequest(
                    f"r{i}",
                    prompt,
                    1024,
                    rng.randint(1, 600),
                    ignore_eos=rng.random() < 0.1,
                    prefix_key=key,
                    prefix_tokens=rng.randint(0, prompt) if key else 0,
                ),
            )
        )
    return out


def drive(engine, arrivals, aborts=()):
    """Arrivals and aborts at their times, steps when due; every emission's time and size per request."""
    seq = itertools.count()
    events = [(t, next(seq), "add", req) for t, req in arrivals] + [(t, next(seq), "abort", rid) for t, rid in aborts]
    heapq.heapify(events)
    chunks: dict[str, list[tuple[float, int, bool]]] = collections.defaultdict(list)
    while True:
        te = engine.next_event_time()
        if events and (te is None or events[0][0] <= te):
            t, _, kind, what = heapq.heappop(events)
            if kind == "add":
                engine.add(what, t)
            else:
                engine.abort(what, t)
            continue
        if te is None:
            break
        for e in engine.step(te).emissions:
            chunks[e.request_id].append((te, e.tokens, e.finished))
    return dict(chunks)


CASES = [
    # profile, KV blocks (None: the card's), arrival rate, stream interval
    ("l4", None, 5.0, 10**9),  # overloaded: preemptions
    ("l4", 600, 8.0, 10**9),  # a small cache: preemptions, prefix evictions
    ("a10g", 300, 20.0, 3),  # chunks every 3 tokens are cohort events
    ("rtx-pro-6000", None, 50.0, 10**9),  # roomy: long stretches of plain steps
    ("l4", 400, 4.0, 1),
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("profile", "blocks", "rate", "interval"), CASES)
def test_same_lives_as_vllm_engine(seed, profile, blocks, rate, interval):
    engine = {"stream_interval": interval}
    if blocks:
        engine |= {"num_gpu_blocks_override": blocks, "max_model_len": 4096}
    cfg = load_profile(profile, engine=engine)
    arrivals = workload(seed, 250, rate)
    rng = random.Random(seed)
    aborts = [(t + rng.uniform(0.0, 30.0), req.request_id) for t, req in arrivals if rng.random() < 0.05]

    ref, fast = VllmEngine(cfg), PlanningEngine(cfg)
    ref_chunks, fast_chunks = drive(ref, arrivals, aborts), drive(fast, arrivals, aborts)

    def by_id(engine):
        return sorted(engine.pop_finished(), key=lambda r: r.request_id)

    ref_done, fast_done = by_id(ref), by_id(fast)
    assert len(ref_done) > 150 and ref.num_aborted_total > 0  # the case exercises what it claims
    assert close(fast_done, ref_done)
    assert close(fast.stats(), ref.stats())
    assert close(fast_chunks, ref_chunks)


def drive_in_runs(engine, arrivals, aborts):
    """As `drive`, but the steps between two events in one `run_until` call (how the planner drives a replica);
    every call's answer (the last step taken) checked against `next_event_time` before it."""
    seq = itertools.count()  # ties in the order `drive` takes them
    events = sorted(
        [(t, next(seq), "add", req) for t, req in arrivals] + [(t, next(seq), "abort", r) for t, r in aborts]
    )
    for n, (t, _, kind, what) in enumerate(events):
        due = engine.next_event_time()
        inclusive = n % 2 == 0  # steps due at t itself: before the event or after it, both must hold
        last = engine.run_until(t, inclusive)
        assert (last is None) == (due is None or due > t or (due == t and not inclusive))
        assert last is None or last <= t
        if kind == "add":
            engine.add(what, t)
        else:
            engine.abort(what, t)
    engine.run_until(math.inf, True)
    assert engine.next_event_time() is None


@pytest.mark.parametrize(("profile", "blocks", "rate", "interval"), CASES[:4])
def test_runs_of_steps_give_the_lives_of_single_steps(profile, blocks, rate, interval):
    """`run_until` (the planner's loop) is `step` at each `next_event_time()`: the same lives, counters and gaps."""
    engine = {"stream_interval": interval}
    if blocks:
        engine |= {"num_gpu_blocks_override": blocks, "max_model_len": 4096}
    cfg = load_profile(profile, engine=engine)
    arrivals = workload(7, 250, rate)
    rng = random.Random(7)
    aborts = [(t + rng.uniform(0.0, 30.0), req.request_id) for t, req in arrivals if rng.random() < 0.05]
    one, runs = PlanningEngine(cfg, token_gaps=Gaps()), PlanningEngine(cfg, token_gaps=Gaps())
    drive(one, arrivals, aborts)
    drive_in_runs(runs, arrivals, aborts)
    done = sorted(one.pop_finished(), key=lambda r: r.request_id)
    assert len(done) > 150 and one.num_aborted_total > 0
    assert close(sorted(runs.pop_finished(), key=lambda r: r.request_id), done)
    assert close(runs.stats(), one.stats())
    assert close(sorted(runs._gaps.values), sorted(one._gaps.values))


def test_token_gaps_are_the_gaps_a_client_sees():
    cfg = load_profile("l4", engine={"num_gpu_blocks_override": 500, "max_model_len": 4096})
    arrivals = workload(3, 200, 6.0)
    chunks = drive(VllmEngine(cfg), arrivals)  # stream interval 1: one chunk per token
    expected = sorted(b - a for times in chunks.values() for (a, _, _), (b, _, _) in itertools.pairwise(times))

    gaps = Gaps()
    fast = PlanningEngine(
        load_profile("l4", engine={"num_gpu_blocks_override": 500, "max_model_len": 4096, "stream_interval": 10**9}),
        token_gaps=gaps,
    )
    drive(fast, arrivals)
    assert fast.num_preemptions_total > 0  # resumed requests' long gaps are in there too
    assert len(gaps.values) == len(expected)
    assert close(sorted(gaps.values), expected)


def test_stretches_skip_steps_for_the_driver():
    """A lone long decode is a handful of driver visits, not one per token."""
    cfg = load_profile("l40s", engine={"stream_interval": 10**9})
    engine = PlanningEngine(cfg)
    engine.add(SimRequest("r", 100, 2000, 2000, ignore_eos=True), 0.0)
    visits = 0
    while (t := engine.next_event_time()) is not None:
        engine.step(t)
        visits += 1
    (done,) = engine.pop_finished()
    assert done.generation_tokens == 2000
    assert engine.steps_total == 2000
    assert visits < 40


MEASURED = """kind: gpu
name: measured
source: "a test: a calibrated step time"
step_time: {overhead_ms: 10, per_sequence_us: 100, per_token_us: 50, per_context_token_ns: 20, per_attention_pair_ns: 1}
engine: {num_gpu_blocks_override: 2000, max_model_len: 4096, stream_interval: 1000000000}
"""


def test_a_measured_step_time_is_the_linear_formula(tmp_path):
    """A prompt of 100 tokens, 3 output tokens, alone: the prefill step is 10 ms + 100 µs (one request) + 100 × 50 µs
    + 5,050 pairs × 1 ns + 100 context tokens × 20 ns; each decode step 10 ms + 100 µs + 50 µs + (p + 1) × (1 + 20)
    ns for a context of p tokens."""
    (tmp_path / "m.yaml").write_text(MEASURED)
    cfg = load_profile(tmp_path / "m.yaml")
    prefill = 0.010 + 100e-6 + 100 * 50e-6 + 5050 * 1e-9 + 100 * 20e-9
    decode = [0.010 + 100e-6 + 50e-6 + (p + 1) * 21e-9 for p in (100, 101)]
    for engine in (VllmEngine(cfg), PlanningEngine(cfg)):
        drive(engine, [(0.0, SimRequest("r", 100, 3, 3))])
        (done,) = engine.pop_finished()
        assert done.ttft == pytest.approx(prefill, rel=1e-12)
        assert done.e2e == pytest.approx(prefill + sum(decode), rel=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_same_lives_with_a_measured_step_time(tmp_path, seed):
    (tmp_path / "m.yaml").write_text(MEASURED)
    cfg = load_profile(tmp_path / "m.yaml")
    arrivals = workload(seed, 200, 30.0)
    ref, fast = VllmEngine(cfg), PlanningEngine(cfg)
    drive(ref, arrivals), drive(fast, arrivals)
    assert ref.num_preemptions_total > 0  # 2,000 blocks: the cache is tight
    assert close(
        sorted(fast.pop_finished(), key=lambda r: r.request_id), sorted(ref.pop_finished(), key=lambda r: r.request_id)
    )
    assert close(fast.stats(), ref.stats())
