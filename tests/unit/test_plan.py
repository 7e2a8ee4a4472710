"""`slabench plan` on small loads whose answers are worked out by hand.

The toy card below spends a fixed 100 ms per engine step (the roofline terms are ~1e-9 s: a 1,000-parameter model), so
a request with a 10-token prompt and 10 output tokens takes one prefill step (its first token at +0.1 s) and nine
decode steps (its last at +1.0 s), whatever else shares the step. With `max_num_seqs: 1` a replica serves one request
at a time: a second one waits for the first to finish.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from slabench.core.errors import UserError
from slabench.plan.checks import latency_checks
from slabench.plan.cost import FleetCost
from slabench.plan.replay import FleetReplay, TokenGaps, _FixedFleet, replay, type7
from slabench.plan.search import PLAN_ENGINE, plan_profile
from slabench.plan.workload import Mix, PlannedLoad, queue_file_load, read_queue, steps_load
from slabench.sim.profiles import load_profile
from slabench.sla.contract import load_contract

STEP = 0.1

TOY_MODEL = """kind: model
name: toy
source: "a test: 1,000 parameters, one layer"
params_b: 0.000001
weight_bytes_per_param: 1
num_layers: 1
num_attention_heads: 1
num_kv_heads: 1
head_dim: 8
activation_kib_per_batched_token: 0
max_model_len: 4096
"""


def toy_gpu(tmp_path: Path, max_num_seqs: int) -> str:
    path = tmp_path / f"toy{max_num_seqs}.yaml"
    path.write_text(
        f"""kind: gpu
name: toy{max_num_seqs}
source: "a test: every step costs its 100 ms overhead"
memory_mib: 1024
memory_bandwidth_gb_s: 1000
dense_bf16_tflops: 100
step_overhead_ms: 100
reserved_mib: 0
engine:
  max_num_seqs: {max_num_seqs}
"""
    )
    return str(path)


@pytest.fixture
def toy_model(tmp_path: Path) -> str:
    path = tmp_path / "toy-model.yaml"
    path.write_text(TOY_MODEL)
    return str(path)


def contract(tmp_path: Path, targets: str) -> Path:
    path = tmp_path / "sla.yaml"
    path.write_text(
        f"""name: toy
load: {{scenario: burst}}
deployment: {{instance_type: g6e.xlarge}}
targets:
{targets}
"""
    )
    return path


def mix(prompt: list[int], output: list[int]) -> Mix:
    n = len(prompt)
    return Mix(
        prompt_tokens=np.array(prompt),
        output_tokens=np.array(output),
        prefix_tokens=np.zeros(n, dtype=np.int64),
        accounts=("",) * n,
        max_tokens=100,
        source="test",
    )


def groups_of_four(groups: int = 10, gap: float = 10.0) -> PlannedLoad:
    """Four requests at once every `gap` seconds, each 10 prompt + 10 output tokens."""
    offsets = np.repeat(np.arange(groups) * gap, 4)
    return PlannedLoad("test", "groups of four", mix([10], [10]), offsets=offsets, rows=np.zeros(len(offsets), int))


def test_one_request_at_a_time_needs_a_replica_per_simultaneous_request(tmp_path, toy_model):
    """Groups of 4 simultaneous requests, one request per replica at a time, TTFT p95 ≤ 0.5 s: with 3 replicas one
    of each group waits a whole request (TTFT 1.1 s for 25 % of requests: p95 = 1.1 s); with 4 none waits."""
    checks = latency_checks(load_contract(contract(tmp_path, "  ttft_p95_s: {max: 0.5}")))
    config = load_profile(toy_gpu(tmp_path, 1), toy_model, engine=PLAN_ENGINE)
    three = replay(config, groups_of_four(), 3)
    assert three.figures["ttft_p95"] == pytest.approx(1.1, abs=1e-6)
    assert three.figures["ttft_p50"] == pytest.approx(STEP, abs=1e-6)
    four = replay(config, groups_of_four(), 4)
    assert four.figures["ttft_p95"] == pytest.approx(STEP, abs=1e-6)
    assert four.figures["e2e_p95"] == pytest.approx(10 * STEP, abs=1e-6)
    assert four.figures["itl_p50"] == pytest.approx(STEP, rel=1e-3)
    assert four.drain_s == pytest.approx(90 + 10 * STEP, abs=1e-6)  # the last group arrives at 90 s

    for balancer in ("round-robin", "least-outstanding"):
        answer = plan_profile(toy_gpu(tmp_path, 1), toy_model, groups_of_four(), checks, balancer, 300.0, 50)
        assert answer.replicas == 4, balancer
        assert answer.below is not None and not answer.below.meets  # the evidence: 3 misses
        assert answer.answer.prediction.figures["ttft_p95"] == pytest.approx(STEP, abs=1e-6)


def test_batching_replicas_serve_several_at_once(tmp_path, toy_model):
    """The same load on replicas that batch 2 sequences (the step time does not grow with the batch here): 2
    replicas hold each group of 4 at once, 1 replica makes two of them wait (TTFT 1.1 s for half)."""
    checks = latency_checks(load_contract(contract(tmp_path, "  ttft_p95_s: {max: 0.5}\n  e2e_p95_s: {max: 1.5}")))
    answer = plan_profile(toy_gpu(tmp_path, 2), toy_model, groups_of_four(), checks, "round-robin", 300.0, 50)
    assert answer.replicas == 2
    assert answer.answer.prediction.figures["e2e_p95"] == pytest.approx(1.0, abs=1e-6)
    assert [p.replicas for p in answer.probes if not p.meets] == [1]
    one = replay(load_profile(toy_gpu(tmp_path, 2), toy_model, engine=PLAN_ENGINE), groups_of_four(), 1)
    assert one.figures["ttft_p95"] == pytest.approx(1.1, abs=1e-6)


def test_a_check_no_fleet_can_meet_is_reported_not_searched(tmp_path, toy_model):
    """10 output tokens take 1.0 s even alone on a replica: an E2E ceiling of 0.5 s cannot be met by any fleet."""
    checks = latency_checks(load_contract(contract(tmp_path, "  e2e_p95_s: {max: 0.5}")))
    answer = plan_profile(toy_gpu(tmp_path, 4), toy_model, groups_of_four(), checks, "round-robin", 300.0, 50)
    assert answer.replicas is None and not answer.probes
    assert "e2e_p95_s ≤ 0.5 s (1 s with every request alone on a replica)" in answer.problem


def test_least_outstanding_sends_to_the_idle_replica_round_robin_does_not(tmp_path, toy_model):
    """2 replicas, one request at a time each. A (50 output tokens: busy 0–5.0 s) and B (10: 0.5–1.5 s), then C at
    2 s: round robin sends C to A's replica (wait until 5.0, TTFT 3.1 s); least outstanding to B's (idle, 0.1 s)."""
    load = PlannedLoad(
        "test", "A, B, C", mix([10, 10, 10], [50, 10, 10]), offsets=np.array([0.0, 0.5, 2.0]), rows=np.arange(3)
    )
    config = load_profile(toy_gpu(tmp_path, 1), toy_model, engine=PLAN_ENGINE)
    rr = replay(config, load, 2, "round-robin")
    lor = replay(config, load, 2, "least-outstanding")
    assert rr.figures["ttft_p99"] == pytest.approx(type7(np.array([STEP, STEP, 3.1]), 0.99), abs=1e-6)
    assert lor.figures["ttft_p99"] == pytest.approx(STEP, abs=1e-6)
    assert rr.per_replica_requests == [2, 1] and lor.per_replica_requests == [1, 2]


def test_a_fleet_far_too_small_stops_early_and_misses(tmp_path, toy_model):
    """200 requests at once on 1 replica serving one at a time: the 20th waits 19 s; with TTFT p95 ≤ 0.5 s the run
    is known to miss long before the 200th request is served (at 200 s)."""
    checks = latency_checks(load_contract(contract(tmp_path, "  ttft_p95_s: {max: 0.5}")))
    load = PlannedLoad("test", "200 at once", mix([10], [10]), offsets=np.zeros(200), rows=np.zeros(200, int))
    p = replay(load_profile(toy_gpu(tmp_path, 1), toy_model, engine=PLAN_ENGINE), load, 1, checks=checks)
    assert not p.complete and "ttft_p95_s" in p.stopped
    assert p.end < 50  # stopped at ~20 s of virtual time (10 % of 200 requests past 0.5 s), not 200 s
    assert math.isinf(p.figures["ttft_p95"])


def test_a_request_the_engine_rejects_is_an_error(tmp_path, toy_model):
    """prompt + max_tokens beyond max_model_len (4096) is vLLM's HTTP 400: counted in error_rate, not in latency."""
    load = PlannedLoad(
        "test", "one too long", mix([10, 4000], [10, 10]), offsets=np.array([0.0, 1.0]), rows=np.arange(2)
    )
    p = replay(load_profile(toy_gpu(tmp_path, 1), toy_model, engine=PLAN_ENGINE), load, 1)
    assert p.errors == 1 and p.ok == 1 and p.figures["error_rate"] == 0.5
    assert p.figures["ttft_p99"] == pytest.approx(STEP, abs=1e-6)


def test_closed_loop_users_send_back_to_back(tmp_path, toy_model):
    """2 users for 10 s on one replica batching 2: each request takes 1.0 s, so each user sends at 0, 1, ..., 9 s."""
    p = replay(
        load_profile(toy_gpu(tmp_path, 2), toy_model, engine=PLAN_ENGINE), steps_load(mix([10], [10]), 2, 10.0), 1
    )
    assert p.requests == 20 and p.ok == 20
    assert p.figures["e2e_p50"] == pytest.approx(1.0, abs=1e-6)


def test_fleet_cost_is_paid_while_the_load_runs():
    """4 replicas at $2/h for 91 s (first arrival to drained), 400 output tokens in 40 calls."""
    cost = FleetCost(2.0, 4, 91.0 / 3600, 400, 40)
    assert cost.usd_per_hour == 8.0
    assert cost.usd_for_load == pytest.approx(8.0 * 91 / 3600)
    assert cost.per_million_output_tokens == pytest.approx(8.0 * 91 / 3600 / 400 * 1e6)
    assert cost.per_1000_calls == pytest.approx(8.0 * 91 / 3600 / 40 * 1000)


def test_token_gap_percentiles_match_numpy_on_the_expanded_values():
    gaps = TokenGaps()
    gaps.add(0.5, 3)
    gaps.add_series(0.01, 0.001, 50, 2)
    gaps.add_series(0.2, -0.01, 5, 1)
    values = [0.5] * 3 + [0.01 + 0.001 * i for i in range(50) for _ in range(2)] + [0.2 - 0.01 * i for i in range(5)]
    fig = gaps.figures()
    for stat, q in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99)):
        assert fig[f"itl_{stat}"] == pytest.approx(np.percentile(values, q), rel=2e-4)
    assert fig["itl_mean"] == pytest.approx(np.mean(values))
    # replicas report in any order (one after another, or interleaved): the same figures to the last bit
    shuffled = TokenGaps()
    rng = np.random.default_rng(1)
    for g, c in rng.permutation(np.array([(0.5, 3), *((0.01 * k, k) for k in range(1, 300))])):
        shuffled.add(float(g), int(c))
    in_order = TokenGaps()
    for k in range(1, 300):
        in_order.add(0.01 * k, k)
    in_order.add(0.5, 3)
    assert shuffled.figures() == in_order.figures()


def test_queue_file_with_its_own_lengths(tmp_path):
    path = tmp_path / "q.csv"
    path.write_text("offset_s,prompt_tokens,output_tokens\n0.0,100,20\n0.5,300,40\n")
    load = queue_file_load(path, "verbose", burst_mix=lambda: pytest.fail("the file has its own lengths"))
    assert list(load.offsets) == [0.0, 0.5]
    assert list(load.mix.prompt_tokens) == [100, 300] and list(load.mix.output_tokens) == [20, 40]

    path.write_text("offset_s,prompt_tokens,output_tokens\n0.0,100,20\n0.5,300,\n")
    with pytest.raises(UserError, match=r"q.csv:3: output_tokens: '' is not a whole number"):
        read_queue(path)
    path.write_text('{"offset_s": 0, "prompt_tokens": 100, "output_tokens": 20}\n{"offset_s": 1, "prompt_tokens": 5}\n')
    with pytest.raises(UserError, match=r"q.csv:2: output_tokens: None is not a whole number"):
        read_queue(path)


def test_replicas_come_with_the_interval_and_the_plan_picks_its_pessimistic_end(tmp_path, toy_model):
    """One request at a time per replica, four at once every 10 s, E2E p95 ≤ 2.5 s. A request alone takes 10 steps:
    1.0 s by the model, 1.3 s at the pessimistic end of the default ×1.3 interval, 1/1.3 s at the optimistic one. A
    replica given k of a group ends its last at k steps-of-a-request: by the model 2 replicas (k = 2: 2.0 s) meet, 1
    (4.0 s) does not; slowed, 2 give 2.6 s and 3 leave one replica with two (2.6 s), so 4 are needed; sped up, 1
    replica still ends its fourth at 3.1 s. So "2 (90 %: 2–4)", planned at 4, where E2E is 1.3 s."""
    checks = latency_checks(load_contract(contract(tmp_path, "  e2e_p95_s: {max: 2.5}\n  ttft_p95_s: {max: 5}")))
    answer = plan_profile(toy_gpu(tmp_path, 1), toy_model, groups_of_four(), checks, "round-robin", 300.0, 50)
    assert answer.factor == 1.3
    assert (answer.replicas, answer.optimistic, answer.pessimistic) == (2, 2, 4)
    assert answer.replicas_text() == "2 (90 %: 2–4)"
    assert answer.planned is not None and answer.planned.meets and answer.planned.replicas == 4
    at = {e: p.figures["e2e_p95"] for e, p in answer.at_planned.items()}
    assert at == pytest.approx({"optimistic": 1.0 / 1.3, "model": 1.0, "pessimistic": 1.3})


def test_a_profile_whose_pessimistic_end_meets_nothing_is_not_planned(tmp_path, toy_model):
    """Stated ×3: a request alone takes 3.0 s at the pessimistic end, over the 2.5 s E2E target whatever the fleet:
    the model's 2 replicas are reported, but no count is planned (the optimistic end, 1/3 s a request, needs one
    replica: its fourth ends at 1.33 s); with ×1 the ends are the model's."""
    checks = latency_checks(load_contract(contract(tmp_path, "  e2e_p95_s: {max: 2.5}")))
    gpu = Path(toy_gpu(tmp_path, 1))
    for factor, planned in ((3.0, None), (1.0, 2)):
        gpu.write_text(gpu.read_text().split("uncertainty")[0] + f"uncertainty: {{step_time_factor_90: {factor}}}\n")
        answer = plan_profile(str(gpu), toy_model, groups_of_four(), checks, "round-robin", 300.0, 50)
        assert answer.replicas == 2 and answer.pessimistic == planned
        if planned is None:
            assert answer.planned is None and "no fleet can meet e2e_p95_s" in (answer.pessimistic_problem or "")
            assert answer.replicas_text() == "2 (90 %: 1–none)"
        else:
            assert answer.replicas_text() == "2 (90 %: 2–2)" and answer.planned is answer.answer


def exact_gpu(tmp_path: Path) -> str:
    """A card whose every step takes exactly 125 ms (a measured step time): steps end on a binary-exact grid."""
    path = tmp_path / "exact.yaml"
    path.write_text(
        "kind: gpu\nname: exact\nsource: a test\nmemory_mib: 1024\nmemory_bandwidth_gb_s: 1000\n"
        "dense_bf16_tflops: 100\nreserved_mib: 0\nstep_time: {overhead_ms: 125}\nengine: {max_num_seqs: 3}\n"
    )
    return str(path)


def on_the_grid(seed: int, n: int, ticks: int, rejected: tuple[int, ...]) -> PlannedLoad:
    """n requests of random lengths arriving on `exact_gpu`'s 125 ms grid over `ticks` grid points (ties with its
    steps); those at `rejected` are beyond max_model_len with max_tokens (HTTP 400)."""
    rng = np.random.default_rng(seed)
    offsets = np.sort(rng.integers(0, ticks, n)) * 0.125
    prompt = rng.integers(5, 60, n).tolist()
    for i in rejected:
        prompt[i] = 4090
    lengths = mix(prompt, rng.integers(1, 40, n).tolist())
    return PlannedLoad("test", "on the grid", lengths, offsets=offsets, rows=np.arange(n))


def test_round_robin_replays_each_replica_on_its_own_with_the_fleet_loops_figures(tmp_path, toy_model):
    """Round robin sends request i to replica i mod N whatever the others do, so a fixed fleet's replicas run one
    after another (`_run_by_replica`) instead of through the fleet-wide event queue: the same figures to the last
    bit, with rejected requests, batching, a drain horizon that cuts the tail, and arrivals due at the very instant a
    step ends (a measured step time of exactly 125 ms: the arrival joins that step's successor, as in the fleet-wide
    loop). A run stopped early is stopped by the same check, at most one window (10 s) later."""
    load = on_the_grid(seed=7, n=400, ticks=320, rejected=(17, 230))
    config = load_profile(exact_gpu(tmp_path), toy_model, engine=PLAN_ENGINE)
    strict = latency_checks(load_contract(contract(tmp_path, "  ttft_p95_s: {max: 0.5}\n  e2e_p95_s: {max: 9}")))
    runs = {"complete": 0, "stopped": 0}
    for replicas, checks, drain in (
        (1, (), 30.0),
        (3, (), 300.0),
        (1, strict, 300.0),
        (4, strict, 300.0),
        (9, (), 300.0),
    ):
        b = same_figures_both_ways(config, load, replicas, checks, drain)
        assert b.errors == 2 or not b.complete
        runs["complete" if b.complete else "stopped"] += 1
    assert runs == {"complete": 3, "stopped": 2}


def same_figures_both_ways(config, load, replicas, checks, drain):
    """Replays `load` replica by replica and through the fleet-wide loop; asserts the same figures to the last bit
    (a run stopped early: by the same check, at most one 10 s window later). The fleet-wide loop's prediction."""
    by_replica = _FixedFleet(config, load, replicas, "round-robin", checks, drain)
    by_replica.run()
    fleet_wide = _FixedFleet(config, load, replicas, "round-robin", checks, drain)
    FleetReplay.run(fleet_wide)
    a = by_replica.summary(replicas, by_replica.sent_to)
    b = fleet_wide.summary(replicas, fleet_wide.sent_to)
    if b.complete:
        assert a.to_dict() == b.to_dict(), replicas
        assert a.per_replica_requests == b.per_replica_requests
    else:
        assert not a.complete and a.stopped.split(":")[0] == b.stopped.split(":")[0], replicas
        assert b.end <= a.end <= b.end + 10.0
    return b


def test_a_sparse_load_is_replayed_replica_by_replica_with_the_fleet_loops_figures(tmp_path, toy_model):
    """Requests hours apart (as the floor's, 10⁴ s apart): the replica-by-replica loop jumps over the empty 10 s
    windows between them, and still gives the fleet-wide loop's figures to the last bit — and a run that fails for
    sure in the last burst is still stopped within a window of where the fleet-wide loop stops it."""
    grid = on_the_grid(seed=3, n=60, ticks=40, rejected=(5,))
    offsets = grid.offsets + np.repeat(np.arange(3) * 7200.0, 20)  # three bursts two hours apart
    load = PlannedLoad("test", "sparse", grid.mix, offsets=offsets, rows=grid.rows)
    config = load_profile(exact_gpu(tmp_path), toy_model, engine=PLAN_ENGINE)
    for replicas in (1, 2, 5):
        b = same_figures_both_ways(config, load, replicas, (), 300.0)
        assert b.complete and b.end > 14400 and b.ok == 59
    # the same requests, the first forty 4 s apart, the last twenty at one instant: too many for one replica's TTFT
    crowded = np.concatenate([np.arange(20) * 4.0, 7200 + np.arange(20) * 4.0, np.full(20, 14400.0)])
    strict = latency_checks(load_contract(contract(tmp_path, "  ttft_p95_s: {max: 0.5}")))
    b = same_figures_both_ways(config, replace(load, offsets=crowded), 1, strict, 300.0)
    assert not b.complete and b.end > 14400  # stopped in the last burst, after two empty hours


@pytest.mark.parametrize(
    "spoil",
    [
        lambda p: p.write_bytes(p.read_bytes()[:40]),  # cut short
        lambda p: np.savez(p, lengths=np.full((12, 2), np.nan)),  # NaN counts
        lambda p: np.savez(p, lengths=np.full((12, 2), np.inf)),
        lambda p: np.savez(p, lengths=-np.ones((12, 2), dtype=np.int64)),  # negative counts
        lambda p: np.savez(p, lengths=np.zeros((12, 2), dtype=np.int64)),  # a prompt of no token
        lambda p: np.savez(p, lengths=np.ones((11, 2), dtype=np.int64)),  # another queue's (a row short)
        lambda p: np.savez(p, other=np.ones((12, 2), dtype=np.int64)),  # no lengths at all
    ],
    ids=["truncated", "nan", "infinity", "negative", "empty-prompt", "other-queue", "no-lengths"],
)
def test_a_spoiled_length_cache_is_rebuilt_not_trusted(tmp_path, monkeypatch, spoil):
    """The plan's length cache is slabench's own file, but a disk or another version can spoil it: whatever is in it,
    the plan gets the lengths it would build from the calls, and the cache is written again."""
    from slabench.plan.workload import _calls, call_mix
    from slabench.workload import load_queue

    calls = _calls(load_queue(kind="burst")[:12])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    built = call_mix(calls, "verbose", "t", b"fingerprint", workers=1)
    (path,) = (tmp_path / "cache" / "slabench").glob("plan-mix-*.npz")
    spoil(path)
    again = call_mix(calls, "verbose", "t", b"fingerprint", workers=1)
    assert (again.prompt_tokens == built.prompt_tokens).all() and (again.output_tokens == built.output_tokens).all()
    with np.load(path) as z:
        assert (z["lengths"][:, 0] == built.prompt_tokens).all()  # rewritten whole
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


@pytest.mark.parametrize("where", ["under-a-file", "read-only"])
def test_a_length_cache_that_cannot_be_written_costs_nothing_but_the_cache(tmp_path, monkeypatch, where):
    """A cache directory under a file, or one the process may not write: the plan has its lengths all the same."""
    from slabench.plan.workload import _calls, call_mix
    from slabench.workload import load_queue

    calls = _calls(load_queue(kind="burst")[:12])
    if where == "under-a-file":
        (tmp_path / "file").write_text("x")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file" / "cache"))
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        (tmp_path / "cache" / "slabench").mkdir(parents=True)
        # (root writes through chmod, and these tests run as root: the write fails as a read-only disk makes it)
        monkeypatch.setattr(np, "savez", lambda *a, **k: (_ for _ in ()).throw(PermissionError(13, "read-only")))
    mix = call_mix(calls, "verbose", "t", b"fingerprint", workers=1)
    assert len(mix.prompt_tokens) == 12 and (mix.prompt_tokens >= 1).all()
