"""The cost model, by hand: replica prices for whole GPUs and MIG slices, $ per million tokens and per 1,000 calls,
and the price table against docs/fleet.md."""

import math

import pytest

from slabench.sla.cost import DeploymentError, cost_lines, replica_price, unit_cost
from slabench.sla.estimates import Estimate, Level, LevelEstimates
from slabench.sla.prices import load_prices
from tests.helpers.sla_helpers import est, replica

# docs/fleet.md, "Instances (AWS us-east-1, on-demand Linux, USD per hour)"
FLEET_MD = {
    "g5.xlarge": 1.006,
    "g5.2xlarge": 1.212,
    "g6.xlarge": 0.8048,
    "g6.2xlarge": 0.9776,
    "g6e.xlarge": 1.861,
    "g6e.2xlarge": 2.24208,
    "g7.2xlarge": 2.52,
    "g7e.2xlarge": 3.36312,
    "g7e.4xlarge": 3.99816,
    "g7e.12xlarge": 8.28608,
    "c7i.xlarge": 0.1785,
    "c7i.2xlarge": 0.357,
    "m7i.large": 0.1008,
}


def test_the_price_table_is_fleet_md_with_its_source_and_date():
    t = load_prices()
    assert t.regions["us-east-1"] == FLEET_MD
    assert t.default_region == "us-east-1" and t.currency == "USD"
    assert "karpenter-provider-aws v1.14.1" in t.source and t.source_date == "2026-07-06"
    assert t.instances["g7e.12xlarge"].gpus == 2 and t.mig_profiles["2g.48gb"].card_fraction == 0.5


def level_with(rps, out_tps, total_tps):
    return LevelEstimates(
        Level(concurrency=8),
        {"throughput_rps": rps, "output_tokens_per_s": out_tps, "total_tokens_per_s": total_tps},
    )


@pytest.mark.parametrize(
    ("rep", "usd_h", "rps", "out_tps", "total_tps", "per_m_out", "per_m_total", "per_1k_calls"),
    [
        # g5.xlarge, 1 replica: $1.006/h. 1000 out tok/s = 3.6 M/h → 1.006 / 3.6 = $0.279444/M;
        # 4000 tok/s = 14.4 M/h → $0.0698611/M; 0.5 calls/s = 1800 calls/h → 1.006 / 1.8 = $0.558889 per 1000.
        (replica("g5.xlarge"), 1.006, 0.5, 1000.0, 4000.0, 0.2794444, 0.06986111, 0.5588889),
        # g6e.xlarge, 2 replicas: $3.722/h. 1500 out tok/s = 5.4 M/h → $0.689259/M; 6000 tok/s = 21.6 M/h →
        # $0.172315/M; 1.2 calls/s = 4320/h → $0.861574 per 1000.
        (replica("g6e.xlarge", 2), 3.722, 1.2, 1500.0, 6000.0, 0.6892593, 0.1723148, 0.8615741),
        # MIG 2g.48gb on g7e.2xlarge: half of $3.36312 = $1.68156/h. 800 out tok/s = 2.88 M/h → $0.583875/M;
        # 3000 tok/s = 10.8 M/h → $0.1557/M; 0.25 calls/s = 900/h → $1.868400 per 1000.
        (replica("g7e.2xlarge", mig_profile="2g.48gb"), 1.68156, 0.25, 800.0, 3000.0, 0.583875, 0.1557, 1.8684),
    ],
    ids=["g5.xlarge", "2x g6e.xlarge", "MIG 2g.48gb slice"],
)
def test_cost_arithmetic_by_hand(rep, usd_h, rps, out_tps, total_tps, per_m_out, per_m_total, per_1k_calls):
    assert rep.total_usd_per_hour == pytest.approx(usd_h)
    lines = cost_lines(rep.total_usd_per_hour, level_with(est(rps), est(out_tps), est(total_tps)))
    assert lines["cost_per_million_output_tokens_usd"].estimate.mean == pytest.approx(per_m_out, rel=1e-6)
    assert lines["cost_per_million_total_tokens_usd"].estimate.mean == pytest.approx(per_m_total, rel=1e-6)
    assert lines["cost_per_1000_calls_usd"].estimate.mean == pytest.approx(per_1k_calls, rel=1e-6)
    text = lines["cost_per_million_output_tokens_usd"].arithmetic
    assert f"${usd_h:.5g}/h" in text and "× 3600 s/h" in text and f"${per_m_out:.4g}" in text


def test_replica_shares():
    assert replica("g7e.12xlarge").per_replica_usd_per_hour == pytest.approx(8.28608 / 2)  # 1 of 2 GPUs
    assert replica("g7e.12xlarge", gpus_per_replica=2).per_replica_usd_per_hour == pytest.approx(8.28608)
    slice_12x = replica("g7e.12xlarge", mig_profile="2g.48gb")
    assert slice_12x.per_replica_usd_per_hour == pytest.approx(8.28608 / 2 / 2)  # half of one of two cards
    assert "MIG 2g.48gb" in slice_12x.arithmetic()
    two_slices = replica("g7e.2xlarge", mig_profile="2g.48gb", mig_slices=2)
    assert two_slices.per_replica_usd_per_hour == pytest.approx(3.36312)


def test_contract_overrides():
    assert replica("g7e.2xlarge", mig_profile="2g.48gb", card_fraction=0.25).per_replica_usd_per_hour == (
        pytest.approx(3.36312 / 4)
    )
    over = replica("g5.xlarge", overrides={"g5.xlarge": 0.5})
    assert over.per_replica_usd_per_hour == 0.5 and over.price_source == "contract override"
    fixed = replica("g6e.xlarge", 3, replica_usd_per_hour=1.25)
    assert fixed.total_usd_per_hour == pytest.approx(3.75)
    assert "hourly_cost_per_replica_usd" in fixed.arithmetic()
    # an instance type only the contract knows is priced as a one-GPU instance
    assert replica("p5.48xlarge", overrides={"p5.48xlarge": 55.0}).per_replica_usd_per_hour == 55.0


@pytest.mark.parametrize(
    ("kwargs", "loc", "says"),
    [
        ({"instance_type": "g6e.xlarg"}, ("deployment", "instance_type"), "did you mean g6e.xlarge"),
        ({"instance_type": "c7i.xlarge"}, ("deployment", "instance_type"), "has no GPU"),
        ({"instance_type": "g5.xlarge", "gpus_per_replica": 2}, ("deployment", "gpus_per_replica"), "has 1"),
        ({"instance_type": "g6e.xlarge", "mig_profile": "2g.48gb"}, ("deployment", "mig", "profile"), "L40S"),
        ({"instance_type": "g7e.2xlarge", "mig_profile": "1g.24gb"}, ("deployment", "mig", "profile"), "unknown"),
        ({"instance_type": "g7e.2xlarge", "mig_profile": "2g.48gb", "mig_slices": 3},
         ("deployment", "mig", "slices_per_replica"), "1.5 cards"),
    ],
)  # fmt: skip
def test_deployments_the_table_cannot_price(kwargs, loc, says):
    itype = kwargs.pop("instance_type")
    with pytest.raises(DeploymentError) as e:
        replica_price(itype, 1, load_prices(), "us-east-1", **kwargs)
    assert e.value.loc == loc and says in str(e.value)


def test_cost_interval_comes_from_the_rate_interval():
    line = unit_cost(3.6, Estimate(1000.0, 50.0, 3, 900.0, 1100.0, samples=300), 1e6, "tok", "million tokens")
    e = line.estimate
    assert e.mean == pytest.approx(1.0)  # $3.6/h ÷ 3.6 M tok/h
    assert (e.ci95_low, e.ci95_high) == (pytest.approx(1 / 1.1), pytest.approx(1 / 0.9))
    assert e.n == 3 and "95% CI" in line.arithmetic
    reaching_zero = unit_cost(3.6, Estimate(10.0, 5.0, 3, -2.0, 22.0, samples=30), 1e3, "calls", "1,000 calls").estimate
    assert math.isinf(reaching_zero.ci95_high)


@pytest.mark.parametrize("rate", [None, Estimate(None), Estimate(0.0)], ids=["absent", "null", "zero"])
def test_no_throughput_means_no_cost(rate):
    line = unit_cost(1.0, rate, 1e6, "tok", "million tokens")
    assert line.estimate is None and "undefined" in line.arithmetic
