"""What a planned fleet costs: the price table of the SLA contract, applied to each GPU profile's instance.

A profile is priced on the first of its `instances` (the cheapest with that card), one GPU per replica, or one MIG
slice for a profile with `mig_profile` — the same arithmetic as `slabench grade` (`sla.cost.replica_price`), with the
contract's region, price file and overrides. `--price PROFILE=USD` sets one replica's hourly cost outright.

The fleet is paid while the load runs: from the first arrival until the last request has finished (every replica up
before the burst, no autoscaling). So $ per million output tokens = fleet $/h × drain hours ÷ output tokens × 10⁶, and
$ per 1,000 graded calls = fleet $/h × drain hours ÷ successful requests × 1,000: the grader's formulas with the
throughput the burst achieved.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from slabench.core.errors import UserError
from slabench.sim.profiles import GpuProfile
from slabench.sla.contract import LoadedContract
from slabench.sla.cost import DeploymentError, ReplicaPrice, replica_price


@dataclass(frozen=True, slots=True)
class FleetCost:
    per_replica_usd_per_hour: float
    replicas: int
    hours: float  # the fleet is paid for these (first arrival → drained)
    output_tokens: int
    calls: int

    @property
    def usd_per_hour(self) -> float:
        return self.per_replica_usd_per_hour * self.replicas

    @property
    def usd_for_load(self) -> float:
        return self.usd_per_hour * self.hours

    @property
    def per_million_output_tokens(self) -> float:
        return self.usd_for_load / self.output_tokens * 1e6 if self.output_tokens else math.inf

    @property
    def per_1000_calls(self) -> float:
        return self.usd_for_load / self.calls * 1e3 if self.calls else math.inf


def profile_price(gpu: GpuProfile, loaded: LoadedContract, override_usd: float | None = None) -> ReplicaPrice:
    """One replica of `gpu` priced with the contract's table (`loaded`: `sla.contract.LoadedContract`)."""
    overrides = dict(loaded.contract.prices.overrides_usd_per_hour)
    if not gpu.instances:
        if override_usd is None:
            raise UserError(
                f"GPU profile {gpu.name}: no `instances` to price it by — add e.g. `instances: [g6e.xlarge]` to the "
                f"profile, or give --price {gpu.name}=USD_PER_REPLICA_HOUR"
            )
        return ReplicaPrice(
            "(none)", loaded.region, override_usd, "--price", "--price", 1.0, "--price", override_usd, 1
        )
    instance = gpu.instances[0]
    try:
        return replica_price(
            instance,
            1,
            loaded.prices,
            loaded.region,
            mig_profile=gpu.mig_profile,
            overrides=overrides,
            replica_usd_per_hour=override_usd,
        )
    except DeploymentError as e:
        raise UserError(
            f"GPU profile {gpu.name}: cannot price {instance}: {e} (or give --price {gpu.name}=USD_PER_REPLICA_HOUR)"
        ) from None
