"""The cost model. Pure functions: a deployment and a price table → $/h; $/h and a measured rate → $ per unit.

- One replica's hourly cost is its share of an instance: whole GPUs are priced pro rata of the instance's GPUs
  (1 of 1 GPU on a g6e.xlarge is the whole instance; 1 of 2 on a g7e.12xlarge is half); a MIG slice is its share
  of one card (a `2g.48gb` slice is half an RTX PRO 6000: half of g7e.2xlarge's price). A contract can override
  either the card fraction or the replica's hourly cost outright.
- Cost per million output tokens = hourly cost of all replicas / (output tokens/s × 3600) × 10⁶; the same over total
  (prompt + output) tokens, and per 1,000 graded calls over successful requests/s.
- The interval of a cost comes from the interval of the rate it divides by (cost falls as throughput rises, so the
  cost's upper bound uses the throughput's lower bound). A lower bound ≤ 0 leaves the cost unbounded above.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from slabench.sla.estimates import Estimate, LevelEstimates
from slabench.sla.prices import PriceTable


class DeploymentError(ValueError):
    """A deployment the price table cannot price; `loc` is the contract field to blame."""

    def __init__(self, loc: tuple[str, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc


@dataclass(frozen=True, slots=True)
class ReplicaPrice:
    instance_type: str
    region: str
    instance_usd_per_hour: float
    price_source: str  # full citation
    price_basis: str  # short form for the arithmetic
    share: float  # of the instance one replica occupies
    share_text: str
    per_replica_usd_per_hour: float
    replicas: int

    @property
    def total_usd_per_hour(self) -> float:
        return self.per_replica_usd_per_hour * self.replicas

    def arithmetic(self) -> str:
        return (
            f"{self.instance_type} ${self.instance_usd_per_hour:g}/h ({self.region}, {self.price_basis}); "
            f"one replica = {self.share_text} = ${self.per_replica_usd_per_hour:.5g}/h; "
            f"{self.replicas} replica(s) × ${self.per_replica_usd_per_hour:.5g}/h = ${self.total_usd_per_hour:.5g}/h"
        )


def _gpu_count(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def replica_price(
    instance_type: str,
    replicas: int,
    table: PriceTable,
    region: str,
    *,
    gpus_per_replica: int | None = None,
    mig_profile: str | None = None,
    mig_slices: int = 1,
    card_fraction: float | None = None,
    overrides: dict[str, float] | None = None,
    replica_usd_per_hour: float | None = None,
) -> ReplicaPrice:
    """Price one replica of a deployment. Raises DeploymentError naming the field to fix."""
    overrides = overrides or {}
    prices = table.regions.get(region, {})
    spec = table.instances.get(instance_type)
    if instance_type in overrides:
        usd, source, basis = overrides[instance_type], "contract override", "contract override"
    elif instance_type in prices:
        usd, source, basis = prices[instance_type], table.citation(), f"{table.pricing}, {table.source_date}"
    else:
        known = sorted(set(prices) | set(overrides))
        hint = _did_you_mean(instance_type, known)
        raise DeploymentError(
            ("deployment", "instance_type"),
            f"unknown instance type {instance_type!r} in region {region}{hint} — known: {', '.join(known)}; "
            "add it to prices.overrides_usd_per_hour or to your own prices.file",
        )
    if replica_usd_per_hour is not None:
        share = replica_usd_per_hour / usd
        text = "the contract's hourly_cost_per_replica_usd"
        return ReplicaPrice(instance_type, region, usd, source, basis, share, text, replica_usd_per_hour, replicas)
    if spec is None:  # priced only by an override: we know nothing about its GPUs
        gpus_in_instance = 1
    elif spec.gpus == 0:
        raise DeploymentError(
            ("deployment", "instance_type"), f"{instance_type} has no GPU; it cannot host a model replica"
        )
    else:
        gpus_in_instance = spec.gpus
    if mig_profile is not None:
        profile = table.mig_profiles.get(mig_profile)
        if profile is None:
            raise DeploymentError(
                ("deployment", "mig", "profile"),
                f"unknown MIG profile {mig_profile!r} — known: {', '.join(sorted(table.mig_profiles)) or 'none'}",
            )
        if spec is not None and spec.gpu != profile.gpu:
            raise DeploymentError(
                ("deployment", "mig", "profile"),
                f"MIG {mig_profile} exists on {profile.gpu}, but {instance_type} has {spec.gpu or 'no GPU'}",
            )
        frac = card_fraction if card_fraction is not None else profile.card_fraction
        cards = mig_slices * frac
        if cards > gpus_in_instance + 1e-9:
            raise DeploymentError(
                ("deployment", "mig", "slices_per_replica"),
                f"{mig_slices} × {mig_profile} = {cards:g} cards, more than {instance_type}'s {gpus_in_instance}",
            )
        share = cards / gpus_in_instance
        text = f"{mig_slices} × MIG {mig_profile} slice ({frac:g} of a card) of {_gpu_count(gpus_in_instance)}"
    else:
        gpus = gpus_per_replica or 1
        if gpus > gpus_in_instance:
            raise DeploymentError(
                ("deployment", "gpus_per_replica"),
                f"{gpus} GPUs per replica, but {instance_type} has {gpus_in_instance}; replicas span one instance",
            )
        share = gpus / gpus_in_instance
        text = f"{gpus} of {_gpu_count(gpus_in_instance)}"
    return ReplicaPrice(instance_type, region, usd, source, basis, share, text, usd * share, replicas)


def _did_you_mean(word: str, options: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, options, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


# -- $ per unit of work ------------------------------------------------------------------------------------------
# cost metric → (rate metric it divides by, units per cost figure, unit name, what the figure is per)
COST_METRICS: dict[str, tuple[str, float, str, str]] = {
    "cost_per_million_output_tokens_usd": ("output_tokens_per_s", 1e6, "output tok", "million output tokens"),
    "cost_per_million_total_tokens_usd": ("total_tokens_per_s", 1e6, "tok", "million tokens (prompt + output)"),
    "cost_per_1000_calls_usd": ("throughput_rps", 1e3, "calls", "1,000 graded calls (successful requests)"),
}


@dataclass(frozen=True, slots=True)
class CostLine:
    metric: str
    estimate: Estimate | None
    arithmetic: str


def _per(usd_per_hour: float, rate: float | None, units: float) -> float | None:
    if rate is None:
        return None
    return math.inf if rate <= 0 else usd_per_hour / (rate * 3600.0) * units


def _money(x: float | None) -> str:
    if x is None:
        return "n/a"
    return "unbounded" if math.isinf(x) else f"${x:.4g}"


def _count(x: float) -> str:
    return f"{x / 1e6:,.4g} M" if x >= 1e6 else f"{x:,.6g}"


def unit_cost(usd_per_hour: float, rate: Estimate | None, units: float, unit: str, per: str) -> CostLine:
    """Cost per `units` of work at the measured `rate` (`unit` per second), with the arithmetic spelled out."""
    if rate is None or rate.mean is None or rate.mean <= 0:
        got = "not measured" if rate is None or rate.mean is None else f"{rate.mean:g} {unit}/s"
        return CostLine("", None, f"cost per {per}: undefined, the rate it divides by is {got}")
    mean = _per(usd_per_hour, rate.mean, units)
    text = (
        f"${usd_per_hour:.5g}/h ÷ ({_count(rate.mean)} {unit}/s × 3600 s/h = {_count(rate.mean * 3600)} {unit}/h) "
        f"× {units:,.0f} = {_money(mean)} per {per}"
    )
    est = Estimate(mean=mean, n=rate.n, samples=rate.samples, low_samples=rate.low_samples)
    if rate.has_interval:
        low = _per(usd_per_hour, rate.ci95_high, units)
        high = _per(usd_per_hour, rate.ci95_low, units)
        est = dataclasses.replace(est, ci95_low=low, ci95_high=high, interval=rate.interval)
        text += f"; 95% CI {_money(low)}–{_money(high)} from the rate's CI over {rate.n} runs"
    elif rate.n <= 1:
        text += " (single run)"
    return CostLine("", est, text)


def cost_lines(usd_per_hour: float, level: LevelEstimates) -> dict[str, CostLine]:
    out = {}
    for metric, (rate_key, units, unit, per) in COST_METRICS.items():
        line = unit_cost(usd_per_hour, level.get(rate_key), units, unit, per)
        out[metric] = CostLine(metric, line.estimate, line.arithmetic)
    return out
