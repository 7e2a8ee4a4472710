"""The fixed-latency engine with a virtual clock: no sleeps."""

import itertools

from slabench.sim.engine import FixedLatencyEngine, SimRequest


def drive(engine, reqs, until=10.0):
    """Step the engine at each of its own event times; return {id: [(time, tokens, finished, reason)]}."""
    out = {r.request_id: [] for r in reqs}
    for r in reqs:
        engine.add(r, 0.0)
    while (t := engine.next_event_time()) is not None and t <= until:
        for em in engine.step(t).emissions:
            out[em.request_id].append((round(t, 9), em.tokens, em.finished, em.finish_reason))
    return out


def test_first_token_after_ttft_then_one_every_itl():
    got = drive(FixedLatencyEngine(ttft=0.1, itl=0.01), [SimRequest("a", 5, max_tokens=100, target_tokens=4)])["a"]
    assert [t for t, *_ in got] == [0.1, 0.11, 0.12, 0.13]
    assert got[-1][2:] == (True, "stop")


def test_max_tokens_caps_and_ignore_eos_always_fills():
    e = FixedLatencyEngine(ttft=0.0, itl=0.001)
    got = drive(
        e,
        [
            SimRequest("cap", 1, max_tokens=3, target_tokens=10),
            SimRequest("eos", 1, max_tokens=6, target_tokens=2, ignore_eos=True),
        ],
    )
    assert sum(n for _, n, *_ in got["cap"]) == 3 and got["cap"][-1][3] == "length"
    assert sum(n for _, n, *_ in got["eos"]) == 6 and got["eos"][-1][3] == "length"


def test_stream_interval_coalesces_tokens_per_chunk():
    got = drive(
        FixedLatencyEngine(ttft=0.1, itl=0.01, stream_interval=4),
        [SimRequest("a", 1, max_tokens=100, target_tokens=10)],
    )["a"]
    assert [n for _, n, *_ in got] == [1, 4, 4, 1]
    assert [t for t, *_ in got] == [0.1, 0.14, 0.18, 0.19]


def test_jitter_is_seeded_and_bounded():
    def times(seed):
        return [
            t
            for t, *_ in drive(
                FixedLatencyEngine(ttft=0.1, itl=0.01, jitter=0.5, seed=seed),
                [SimRequest("a", 1, max_tokens=50, target_tokens=50)],
            )["a"]
        ]

    a, b = times(1), times(1)
    assert a == b and a != times(2)
    assert 0.05 <= a[0] <= 0.15
    gaps = [y - x for x, y in itertools.pairwise(a)]
    assert all(0.005 - 1e-12 <= g <= 0.015 + 1e-12 for g in gaps)


def test_abort_frees_the_request():
    e = FixedLatencyEngine(ttft=0.1, itl=0.01)
    e.add(SimRequest("a", 1, max_tokens=10, target_tokens=10), 0.0)
    e.abort("a", 0.05)
    assert e.next_event_time() is None
    assert e.stats()["num_requests_running"] == 0
