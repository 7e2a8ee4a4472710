"""A calibrated profile's 90 % interval widens with the distance beyond the levels its calibration saw: the rule by
hand, the load a planned replica carries (requests in flight, by Little's law), and the plan applying both on the toy
card of `test_plan` (every step 100 ms: a 10-token answer takes 1.0 s however many share the batch)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from slabench.plan.checks import latency_checks
from slabench.plan.level import in_flight_per_replica
from slabench.plan.replay import replay
from slabench.plan.search import PLAN_ENGINE, plan_profile
from slabench.plan.workload import steps_load
from slabench.sim.profiles import Uncertainty, load_profile
from slabench.sla.contract import load_contract
from tests.unit.test_plan import TOY_MODEL, contract, groups_of_four, mix, toy_gpu


@pytest.fixture
def toy_model(tmp_path: Path) -> str:
    path = tmp_path / "toy-model.yaml"
    path.write_text(TOY_MODEL)
    return str(path)


def test_the_factor_holds_within_the_levels_seen_and_widens_as_f_to_the_ratio_beyond():
    u = Uncertainty(step_time_factor_90=1.2, levels=(2, 4))
    assert [u.extrapolation(x) for x in (2, 3, 4, 8, 16, 1, 0.25)] == [1, 1, 1, 2, 4, 2, 2]  # below 1 counts as 1
    assert u.factor_at(3) == 1.2  # within 2–4 users
    assert u.factor_at(8) == pytest.approx(1.44)  # twice the highest: ln f doubled, 1.2² = 1.44
    assert u.factor_at(16) == pytest.approx(2.0736)  # four times: 1.2⁴
    assert u.factor_at(1) == pytest.approx(1.44)  # half the lowest
    assert u.factor_at(math.inf) == 10.0 and Uncertainty(step_time_factor_90=2, levels=(1, 1)).factor_at(8) == 10.0
    assert Uncertainty(step_time_factor_90=1.2).factor_at(1000) == 1.2  # public figures: no levels, no widening
    with pytest.raises(ValueError, match="lowest ≤ highest"):
        Uncertainty(levels=(4, 2))


def test_in_flight_per_replica_is_littles_law(tmp_path: Path, toy_model: str):
    """Three closed-loop users for 10 s on one replica: always three in flight (each request 1.0 s, back to back).
    Groups of four every 10 s on 2 one-at-a-time replicas: each replica holds its pair for 1.0 + 2.0 s per group,
    60 request-seconds over 2 replicas × 92 s (the last group ends at 90 + 2.0)."""
    batching = load_profile(toy_gpu(tmp_path, 4), toy_model, engine=PLAN_ENGINE)
    three = replay(batching, steps_load(mix([10], [10]), 3, 10.0), 1)
    assert three.ok == 30 and in_flight_per_replica(three) == pytest.approx(3.0)
    one_at_a_time = load_profile(toy_gpu(tmp_path, 1), toy_model, engine=PLAN_ENGINE)
    pairs = replay(one_at_a_time, groups_of_four(), 2)
    assert in_flight_per_replica(pairs) == pytest.approx(60 / (2 * 92))


def test_the_plan_widens_a_calibrated_profiles_interval_beyond_its_levels(tmp_path: Path, toy_model: str):
    """Three closed-loop users on the batching toy card, E2E p95 ≤ 2.5 s: one replica meets (1.0 s), carrying 3
    requests in flight. Stated ×1.3 as public figures, the pessimistic end is 1.3 s; calibrated at one user (levels
    [1, 1]), 3 in flight is 3 times beyond: ×1.3³ = ×2.197, and the pessimistic end is 2.197 s (still within 2.5)."""
    checks = latency_checks(load_contract(contract(tmp_path, "  e2e_p95_s: {max: 2.5}")))
    load = steps_load(mix([10], [10]), 3, 10.0)
    gpu = Path(toy_gpu(tmp_path, 4))
    base = gpu.read_text()
    for levels, factor in (("", 1.3), (", levels: [1, 1]", 1.3**3)):
        gpu.write_text(base + f"uncertainty: {{step_time_factor_90: 1.3{levels}}}\n")
        answer = plan_profile(str(gpu), toy_model, load, checks, "round-robin", 300.0, 10)
        assert answer.replicas == 1 and answer.level == pytest.approx(3.0)
        assert answer.factor == pytest.approx(factor)
        assert answer.pessimistic == 1 and answer.replicas_text() == "1 (90 %: 1–1)"
        assert answer.at_planned["pessimistic"].figures["e2e_p95"] == pytest.approx(factor, rel=1e-6)
    # --step-time-factor states the interval outright: no widening
    answer = plan_profile(str(gpu), toy_model, load, checks, "round-robin", 300.0, 10, step_time_factor=1.3)
    assert answer.factor == 1.3
