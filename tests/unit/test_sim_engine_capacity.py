"""The KV-capacity cliff emerges from the arithmetic: closed-loop clients in virtual time on the 24 GB profiles.

A small version of `benchmarks/sim_calibration.py` (which prints the full table): fixed lengths near the retail
workload's (3k-token prompts, 600-token answers), so a request holds ~3.3k tokens of KV on average. On a 24 GB card
(~88k tokens) 16 such requests fit and 32 do not: requests queue for blocks and TTFT jumps. Giving the same card
twice the blocks removes the jump, so it is the KV cache — not compute — that makes it.
"""

from __future__ import annotations

from slabench.sim.engine import SimRequest
from slabench.sim.profiles import load_profile
from slabench.sim.virtual import Trace, run_closed_loop
from slabench.sim.vllm_engine import VllmEngine


def steady_ttfts(gpu: str, concurrency: int, **engine) -> tuple[list[float], dict]:
    eng = VllmEngine(load_profile(gpu, engine=engine))

    def make(client: int, k: int) -> SimRequest:
        # Lengths vary a little per request so the clients drift apart, as real ones do.
        return SimRequest(f"c{client}-{k}", 2800 + 37 * ((client * 7 + k * 3) % 11), 2048, 550 + 19 * (k % 6))

    traces = run_closed_loop(eng, make, concurrency, 4)
    first: dict[int, Trace] = {}
    for tr in traces:
        first.setdefault(tr.client, tr)
    warm = max(tr.arrival + tr.e2e for tr in first.values())  # every client is past its first request
    return [tr.ttft for tr in traces if tr.arrival >= warm], eng.stats()


def p95(xs: list[float]) -> float:
    return sorted(xs)[max(0, round(0.95 * len(xs)) - 1)]


def test_l4_ttft_cliff_between_16_and_32_comes_from_kv_capacity():
    at16, s16 = steady_ttfts("l4", 16)
    at32, _ = steady_ttfts("l4", 32)
    assert len(at16) >= 16 and len(at32) >= 32
    assert s16["num_preemptions_total"] == 0
    assert p95(at32) > 10 * p95(at16)  # the cliff
    # Same card, twice the KV blocks (a counterfactual): 32 clients fit and the cliff is gone.
    blocks = load_profile("l4").num_gpu_blocks
    roomy, _ = steady_ttfts("l4", 32, num_gpu_blocks_override=2 * blocks)
    assert p95(roomy) < 3 * p95(at16)


def test_the_whole_rtx_pro_6000_has_room_for_64():
    at16, _ = steady_ttfts("rtx-pro-6000", 16)
    at64, s64 = steady_ttfts("rtx-pro-6000", 64)
    assert s64["num_preemptions_total"] == 0
    assert p95(at64) < 3 * p95(at16)
