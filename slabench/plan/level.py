"""The load a planned replica carries, in the unit a calibration measures it in: requests in flight per replica (a
closed-loop sweep's users). A calibrated profile's interval holds at the levels its runs saw and widens beyond them
(`slabench.sim.profiles.Uncertainty.factor_at`). Pure."""

from __future__ import annotations

import math

from slabench.plan.replay import Prediction


def in_flight_per_replica(p: Prediction) -> float:
    """The mean requests in flight (running and waiting) per replica while the load ran, by Little's law: every
    served request's time in the system summed, over replicas × the span from the first arrival to the last end. A
    request that never finished counts as infinitely long (its fleet never drained)."""
    served = p.requests - p.errors
    e2e_mean = p.figures.get("e2e_mean")
    if not served or e2e_mean is None:
        return 0.0
    span = p.drain_s
    if not (span > 0 and math.isfinite(span) and math.isfinite(e2e_mean)):
        return math.inf
    return e2e_mean * served / (p.replicas * span)
