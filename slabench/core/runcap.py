"""SLABENCH_MAX_RUN_S: a cap on every run's duration, for smoke runs of printed commands (the docs' commands run in CI
as printed, in seconds instead of minutes). Unset, nothing changes."""

from __future__ import annotations

import math
import os

from slabench.core.errors import UserError

ENV = "SLABENCH_MAX_RUN_S"


def max_run_s() -> float | None:
    """The cap in seconds, or None when unset."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        cap = float(raw)
    except ValueError:
        cap = 0.0
    if not 0 < cap < math.inf:
        raise UserError(f"{ENV}={raw!r}: must be a number of seconds above 0 (or unset)")
    return cap


def capped(seconds: float | None) -> float | None:
    """`seconds` (None: unbounded) under the cap."""
    cap = max_run_s()
    if cap is None:
        return seconds
    return cap if seconds is None else min(seconds, cap)
