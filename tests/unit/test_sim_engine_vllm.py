"""The vLLM capacity model with a virtual clock: batching, KV accounting, preemption, queueing, chunked prefill,
prefix caching, streaming, and TTFT at concurrency 1 against the prefill arithmetic written out by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from slabench.sim.engine import SimRequest
from slabench.sim.profiles import load_profile
from slabench.sim.virtual import run
from slabench.sim.vllm_engine import RequestTooLong, VllmEngine

# docs/fleet.md's L4 and the reference model, written out (not read from the profile) so the arithmetic is checked.
PARAMS = 8.03e9
WEIGHT_BYTES = 8.03e9  # FP8: one byte per parameter
KV_BYTES = 2 * 32 * 8 * 128 * 2  # 128 KiB per token
ATTN_PER_PAIR = 4 * 32 * 32 * 128
L4_FLOPS = 120e12 * 0.5
L4_BW = 300e9 * 0.8
OVERHEAD = 0.004


def l4_step(chunks: list[tuple[int, int]]) -> float:
    """Roofline time of an L4 step computing n new tokens after p cached ones for each (p, n)."""
    tokens = sum(n for _, n in chunks)
    pairs = sum(n * p + n * (n + 1) / 2 for p, n in chunks)
    compute = (2 * PARAMS * tokens + ATTN_PER_PAIR * pairs) / L4_FLOPS
    memory = (WEIGHT_BYTES + KV_BYTES * sum(p + n for p, n in chunks)) / L4_BW
    return OVERHEAD + max(compute, memory)


def engine(gpu: str = "l4", seed: int = 0, **options) -> VllmEngine:
    return VllmEngine(load_profile(gpu, engine=options), seed=seed)


def tiny(blocks: int, **options) -> VllmEngine:
    """An L4 engine whose KV cache holds `blocks` blocks of 16 tokens (vLLM's --num-gpu-blocks-override)."""
    return engine(num_gpu_blocks_override=blocks, max_model_len=blocks * 16, **options)


def req(rid: str, prompt: int, out: int, **kw) -> SimRequest:
    return SimRequest(rid, prompt, max_tokens=kw.pop("max_tokens", out), target_tokens=out, **kw)


def drive(eng: VllmEngine, arrivals: list[tuple[float, SimRequest]], watch=None) -> dict[str, list]:
    """Run to completion, calling watch(engine) after every step; returns request id → [(time, emission)]."""
    pending = sorted(arrivals, key=lambda a: a[0])
    seen: dict[str, list] = {r.request_id: [] for _, r in arrivals}
    while True:
        te = eng.next_event_time()
        if pending and (te is None or pending[0][0] <= te):
            t, r = pending.pop(0)
            eng.add(r, t)
            continue
        if te is None:
            return seen
        for e in eng.step(te).emissions:
            seen.setdefault(e.request_id, []).append((te, e))
        if watch:
            watch(eng)


# ---------------------------------------------------------------- concurrency 1: the arithmetic


def test_ttft_at_concurrency_1_equals_the_prefill_arithmetic():
    tr = run(engine(), [(0.0, req("a", 1000, 5))])["a"]
    compute = (2 * PARAMS * 1000 + ATTN_PER_PAIR * 1000 * 1001 / 2) / L4_FLOPS
    memory = (WEIGHT_BYTES + 1000 * KV_BYTES) / L4_BW
    assert compute > memory  # a 1k-token prefill is compute-bound on an L4
    assert tr.ttft == pytest.approx(OVERHEAD + compute, rel=1e-12)
    # The next token is a decode step: memory-bound, weights plus 1001 tokens of KV.
    assert tr.chunk_times[1] - tr.chunk_times[0] == pytest.approx(
        OVERHEAD + (WEIGHT_BYTES + 1001 * KV_BYTES) / L4_BW, rel=1e-12
    )


def test_a_prompt_longer_than_the_token_budget_is_prefilled_in_chunks():
    tr = run(engine(), [(0.0, req("a", 5000, 3))])["a"]
    # max_num_batched_tokens is 2048 on a 24 GB card (vLLM's default): chunks of 2048, 2048, 904.
    expected = l4_step([(0, 2048)]) + l4_step([(2048, 2048)]) + l4_step([(4096, 904)])
    assert tr.ttft == pytest.approx(expected, rel=1e-12)


def test_timings_follow_vllms_definitions():
    eng = engine(max_num_seqs=1)
    traces = run(eng, [(0.0, req("a", 500, 20)), (0.0, req("b", 500, 20))])
    timings = {t.request_id: t for t in eng.pop_finished()}
    assert eng.pop_finished() == []  # drained
    a, b = timings["a"], timings["b"]
    assert a.queue_time == 0 and b.queue_time == pytest.approx(a.e2e)  # b starts when a's slot frees
    for t in (a, b):
        tr = traces[t.request_id]
        assert t.queue_time + t.prefill_time == pytest.approx(tr.ttft)
        assert t.ttft + t.decode_time == pytest.approx(tr.e2e)
        assert (t.prompt_tokens, t.generation_tokens, t.finish_reason) == (500, 20, "length")


# ---------------------------------------------------------------- batching and queueing


def test_concurrent_requests_share_steps():
    alone = engine()
    run(alone, [(0.0, req("a", 200, 50))])
    pair = engine()
    traces = run(pair, [(0.0, req("a", 200, 50)), (0.0, req("b", 200, 50))])
    assert pair.steps_total == alone.steps_total == 50  # one prefill step + 49 decode steps, shared
    assert traces["a"].chunk_times == traces["b"].chunk_times
    # Batching amortises the weights: a step for two costs more than for one, far less than two steps.
    one, two = alone.busy_time_total, pair.busy_time_total
    assert one < two < 1.1 * one


def test_max_num_seqs_queues_the_rest_in_arrival_order():
    eng = engine(max_num_seqs=2)
    arrivals = [(0.0, req(f"r{i}", 300, 30)) for i in range(5)]
    states = []
    drive(eng, arrivals, watch=lambda e: states.append(e.stats()))
    assert max(s["num_requests_running"] for s in states) == 2
    assert max(s["num_requests_waiting"] for s in states) == 3
    timings = sorted(eng.pop_finished(), key=lambda t: t.arrival)
    starts = [t.scheduled for t in timings]
    assert starts == sorted(starts) and len(set(starts)) == 3  # FCFS: pairs start together, in order
    assert timings[2].scheduled == pytest.approx(timings[0].last_token)  # a slot frees, the next one starts


def test_the_head_of_the_queue_blocks_smaller_requests_behind_it():
    eng = tiny(20, enable_prefix_caching=False)
    arrivals = [(0.0, req("a", 150, 40)), (0.01, req("big", 250, 10)), (0.02, req("small", 20, 5))]
    drive(eng, arrivals)
    t = {x.request_id: x for x in eng.pop_finished()}
    # "small" (2 blocks) would fit beside "a", but "big" (16 blocks) is ahead of it and waits for a's blocks.
    assert t["big"].scheduled == pytest.approx(t["a"].last_token)
    assert t["small"].scheduled >= t["big"].scheduled


# ---------------------------------------------------------------- KV cache accounting


def test_kv_usage_tracks_allocated_blocks_and_returns_to_zero():
    eng = engine(enable_prefix_caching=False)
    blocks = eng.config.num_gpu_blocks
    usage = []
    drive(eng, [(0.0, req("a", 100, 40))], watch=lambda e: usage.append(e.stats()["kv_cache_usage_perc"]))
    # Each step call schedules the next step: the j-th holds KV for 100 + j tokens (one new token per step).
    expected = [math.ceil((100 + j) / 16) / blocks for j in range(40)] + [0.0]
    assert usage == pytest.approx(expected)


def test_capacity_comes_from_memory_and_bytes_per_token():
    eng = engine()
    cfg = eng.config
    assert cfg.kv_bytes_per_token == KV_BYTES
    assert eng.stats()["num_gpu_blocks"] == cfg.num_gpu_blocks == cfg.kv_capacity_tokens // 16


# ---------------------------------------------------------------- preemption


def test_out_of_blocks_preempts_the_newest_and_recomputes_it():
    eng = tiny(40, enable_prefix_caching=False)
    arrivals = [(0.0, req(r, 100, 200, ignore_eos=True)) for r in ("old", "mid", "new")]
    peak = []
    seen = drive(eng, arrivals, watch=lambda e: peak.append(e.stats()["kv_cache_usage_perc"]))
    t = {x.request_id: x for x in eng.pop_finished()}
    assert eng.num_preemptions_total >= 1
    assert t["old"].num_preemptions == 0 and t["new"].num_preemptions >= 1
    assert t["old"].last_token == t["mid"].last_token < t["new"].last_token  # old and mid share every step
    assert max(peak) <= 1.0
    # Recompute does not repeat tokens to the client: each stream carries exactly its 200 tokens, finished once.
    for rid, chunks in seen.items():
        assert sum(e.tokens for _, e in chunks) == 200, rid
        assert [e.finished for _, e in chunks].count(True) == 1
    assert eng.generation_tokens_total == 600
    # ...but it costs GPU time: the same work with room for all three is cheaper.
    roomy = tiny(200, enable_prefix_caching=False)
    drive(roomy, arrivals)
    assert roomy.num_preemptions_total == 0
    assert roomy.busy_time_total < eng.busy_time_total


def test_with_prefix_caching_a_preempted_request_finds_its_own_blocks():
    arrivals = [(0.0, req(r, 300, 400, ignore_eos=True)) for r in ("old", "new")]
    plain, cached = tiny(60, enable_prefix_caching=False), tiny(60)
    drive(plain, arrivals)
    drive(cached, arrivals)
    assert plain.num_preemptions_total >= 1 and cached.num_preemptions_total >= 1
    assert cached.prefix_cache_hits_total > 0 and plain.prefix_cache_hits_total == 0
    assert cached.busy_time_total < plain.busy_time_total  # the recompute skipped the cached blocks


# ---------------------------------------------------------------- chunked prefill mixed with decodes


def test_a_long_prefill_is_chunked_into_the_decode_steps():
    eng = engine()
    traces = run(eng, [(0.0, req("a", 100, 60)), (0.5, req("b", 5000, 2))])
    a, b = traces["a"], traces["b"]
    # a keeps decoding through b's prefill: every step of b's prefill also produced a token for a.
    prefill_ends = [t for t in a.chunk_times if b.arrival < t <= b.chunk_times[0]]
    gaps = [y - x for x, y in zip(a.chunk_times, a.chunk_times[1:], strict=False) if b.arrival < y <= b.chunk_times[0]]
    assert len(prefill_ends) == 4  # the step in flight when b arrived, then b's three chunks
    assert prefill_ends[-1] == b.chunk_times[0]
    # b's chunks take what a's decode leaves of the 2048-token budget: 2047, 2047, 906. The step that ends with
    # a's token i computes the KV of a's position 99 + i.
    p0 = 99 + a.chunk_times.index(prefill_ends[1])
    assert gaps[1:] == pytest.approx(
        [
            l4_step([(p0, 1), (0, 2047)]),
            l4_step([(p0 + 1, 1), (2047, 2047)]),
            l4_step([(p0 + 2, 1), (4094, 906)]),
        ],
        rel=1e-12,
    )


# ---------------------------------------------------------------- prefix caching


def test_a_prefix_cache_hit_cuts_ttft_by_the_cached_tokens():
    first = req("a", 3000, 5, prefix_key="acct", prefix_tokens=1500)
    second = req("b", 3000, 5, prefix_key="acct", prefix_tokens=1500)
    eng = engine()
    traces = run(eng, [(0.0, first), (10.0, second)])
    a, b = traces["a"], traces["b"]
    hit = 1500 // 16 * 16  # whole blocks only
    assert (a.cached_prompt_tokens, b.cached_prompt_tokens) == (0, hit)
    assert a.ttft == pytest.approx(l4_step([(0, 2048)]) + l4_step([(2048, 952)]), rel=1e-12)
    assert b.ttft == pytest.approx(l4_step([(hit, 3000 - hit)]), rel=1e-12)
    assert b.ttft < 0.6 * a.ttft
    s = eng.stats()
    assert (s["prefix_cache_queries_total"], s["prefix_cache_hits_total"]) == (6000, hit)

    off = engine(enable_prefix_caching=False)
    traces = run(off, [(0.0, first), (10.0, second)])
    assert traces["b"].ttft == pytest.approx(a.ttft) and traces["b"].cached_prompt_tokens == 0
    assert off.stats()["prefix_cache_queries_total"] == 0


def test_requests_in_flight_together_both_compute_the_prefix():
    # vLLM caches a block once it is computed: a request admitted before that finds nothing.
    eng = engine()
    traces = run(eng, [(0.0, req(r, 900, 5, prefix_key="acct", prefix_tokens=500)) for r in ("a", "b")])
    assert traces["a"].cached_prompt_tokens == traces["b"].cached_prompt_tokens == 0


def test_shared_prefix_blocks_are_counted_once():
    eng = engine()
    usage = []
    arrivals = [(0.0, req("a", 1600, 100, prefix_key="k", prefix_tokens=1600))]
    arrivals += [(2.0, req("b", 1600, 5, prefix_key="k", prefix_tokens=1600))]
    seen = drive(eng, arrivals, watch=lambda e: usage.append(e._used))
    assert seen["b"][0][1].cached_prompt_tokens == 99 * 16  # the last prompt token is always computed
    # a holds at most ceil(1700 / 16) = 107 blocks, 99 of them shared; b adds only its unshared tail.
    assert seen["b"][0][0] < seen["a"][-1][0]  # they did run together
    assert max(usage) <= 107 + 2


def test_unreferenced_prefixes_are_evicted_least_recently_used_first():
    eng = tiny(40)

    def keyed(rid: str, key: str) -> SimRequest:
        return req(rid, 200, 1, prefix_key=key, prefix_tokens=160)  # 10 shared blocks each

    arrivals = [(0.0, keyed("k1-a", "k1")), (1.0, keyed("k2-a", "k2")), (2.0, keyed("k1-b", "k1"))]
    arrivals += [(3.0, req("big", 400, 1))]  # 25 blocks: 20 are free, so 5 cached blocks must go
    arrivals += [(4.0, keyed("k1-c", "k1")), (5.0, keyed("k2-c", "k2"))]
    traces = run(eng, arrivals)
    cached = {rid: tr.cached_prompt_tokens for rid, tr in traces.items()}
    assert cached["k1-b"] == 160  # k1 was used again after k2, so k2 is the least recently used...
    # ...and loses its last 5 blocks: what is left is still a prefix the next k2 request can use.
    assert cached["k1-c"] == 160 and cached["k2-c"] == 80


# ---------------------------------------------------------------- streaming, abort, limits, determinism


def test_stream_interval_coalesces_tokens_and_flushes_at_the_end():
    tr = run(engine(stream_interval=4), [(0.0, req("a", 50, 10))])["a"]
    assert tr.chunk_tokens == [1, 4, 4, 1] and tr.finish_reason == "length"
    stop = run(engine(stream_interval=4), [(0.0, req("b", 50, 6, max_tokens=100))])["b"]
    assert stop.chunk_tokens == [1, 4, 1] and stop.finish_reason == "stop"


def test_abort_frees_the_request_and_the_others_carry_on():
    eng = engine(enable_prefix_caching=False)
    eng.add(req("keep", 100, 20), 0.0)
    eng.add(req("gone", 100, 20), 0.0)
    t = eng.next_event_time()
    eng.step(t)  # schedules the prefill of both
    eng.abort("gone", t)  # while its step is in flight
    eng.abort("unknown", t)  # no-op
    emitted = {e.request_id for e in eng.step(eng.next_event_time()).emissions}
    assert emitted == {"keep"}
    drive(eng, [])
    s = eng.stats()
    assert s["kv_cache_usage_perc"] == 0 and s["num_requests_running"] == 0
    assert (s["request_success_total"], s["num_aborted_total"]) == (1, 1)
    assert [t.request_id for t in eng.pop_finished()] == ["keep"]

    queued = engine(max_num_seqs=1)
    queued.add(req("first", 100, 5), 0.0)
    queued.add(req("second", 100, 5), 0.0)
    queued.step(0.0)
    assert queued.stats()["num_requests_waiting"] == 1
    queued.abort("second", 0.0)
    assert queued.stats()["num_requests_waiting"] == 0 and queued.stats()["num_requests_running"] == 1


def test_requests_beyond_max_model_len_are_refused():
    eng = engine(max_model_len=4096)
    with pytest.raises(RequestTooLong, match="maximum context length is 4096"):
        eng.add(req("a", 4000, 100), 0.0)
    with pytest.raises(RequestTooLong):
        eng.add(req("b", 0, 10), 0.0)
    assert eng.next_event_time() is None


def test_step_jitter_is_seeded():
    def times(seed: int) -> list[float]:
        return run(engine(seed=seed, step_time_jitter=0.05), [(0.0, req("a", 500, 30))])["a"].chunk_times

    assert times(1) == times(1)
    assert times(1) != times(2)
    plain = run(engine(), [(0.0, req("a", 500, 30))])["a"].chunk_times
    assert all(abs(x - y) <= 0.05 * y for x, y in zip(times(1), plain, strict=True))


def test_an_early_or_idle_step_does_nothing():
    eng = engine()
    assert eng.next_event_time() is None and eng.step(5.0).emissions == []
    eng.add(req("a", 100, 3), 1.0)
    assert eng.next_event_time() == 1.0
    eng.step(1.0)
    end = eng.next_event_time()
    assert end > 1.0 and eng.step(end - 1e-6).emissions == [] and eng.next_event_time() == end


def test_a_request_taken_by_a_late_step_never_waited_less_than_nothing():
    """The HTTP server's loop can call step() after the batch was due; a request that arrived in between is not in
    the step that began before it came (as on a GPU), so its phases (as /metrics reports them) are never negative
    and its TTFT is not shortened by the lateness: a late-running CPU once put it in that step, which made the queue
    time's histogram sum fall (the scrape reader refused the run) and TTFT shorter than the planner's."""
    eng = engine()
    eng.add(req("a", 100, 3), 1.0)
    eng.step(1.0)
    due = eng.next_event_time()
    eng.add(req("b", 100, 3), due + 0.05)  # arrives after the batch end was due
    eng.step(due + 0.05)
    while (t := eng.next_event_time()) is not None:
        eng.step(t)
    timings = {t.request_id: t for t in eng.pop_finished()}
    b = timings["b"]
    assert b.scheduled > due and min(b.queue_time, b.prefill_time, b.decode_time) >= 0


# ---------------------------------------------------------------- invariants under random load


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    reqs=st.lists(
        st.tuples(
            st.floats(0, 3),  # arrival
            st.integers(1, 300),  # prompt
            st.integers(1, 120),  # output
            st.sampled_from([None, "p", "q"]),  # shared prefix key
            st.integers(0, 300),  # prefix tokens
        ),
        min_size=1,
        max_size=14,
    ),
    blocks=st.integers(30, 60),
    caching=st.booleans(),
    interval=st.integers(1, 5),
    budget=st.sampled_from([64, 256, 2048]),
)
def test_every_request_gets_exactly_its_tokens_and_nothing_leaks(reqs, blocks, caching, interval, budget):
    eng = tiny(
        blocks, enable_prefix_caching=caching, stream_interval=interval, max_num_batched_tokens=budget, max_num_seqs=6
    )
    arrivals = []
    for i, (t, prompt, out, key, ptoks) in enumerate(reqs):
        prompt = min(prompt, blocks * 16 - out)
        r = SimRequest(f"r{i}", prompt, out, out, prefix_key=key, prefix_tokens=min(ptoks, prompt) if key else 0)
        arrivals.append((t, r))

    def watch(e: VllmEngine) -> None:
        s = e.stats()
        assert 0 <= s["kv_cache_usage_perc"] <= 1
        assert e._used + e._cached_free <= e.config.num_gpu_blocks
        held = sum(x.blocks for x in e._running) + sum(p.active for p in e._prefixes.values())
        assert held == e._used  # every block in use belongs to a running request or a referenced prefix

    seen = drive(eng, arrivals, watch=watch)
    for t, r in arrivals:
        chunks = [e for _, e in seen[r.request_id]]
        assert sum(e.tokens for e in chunks) == r.target_tokens
        assert [e.finished for e in chunks] == [False] * (len(chunks) - 1) + [True]
        assert all(1 <= e.tokens <= interval for e in chunks[1:-1])
        times = [x for x, _ in seen[r.request_id]]
        assert times == sorted(times) and times[0] > t
    s = eng.stats()
    assert s["num_requests_running"] == s["num_requests_waiting"] == s["kv_cache_usage_perc"] == 0
    assert s["request_success_total"] == len(arrivals)
    assert s["generation_tokens_total"] == sum(r.target_tokens for _, r in arrivals)
    # Every cached block nobody references is reclaimable, and nothing else is.
    assert eng._cached_free == sum(e.blocks - e.active for e in eng._prefixes.values())
    assert {k for k, e in eng._prefixes.items() if e.blocks > e.active} == set(eng._evictable)
    if not caching:
        assert eng._cached_free == 0 and s["prefix_cache_queries_total"] == 0
    assert s["prefix_cache_hits_total"] <= s["prefix_cache_queries_total"]
