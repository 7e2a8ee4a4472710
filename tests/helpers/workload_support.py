"""Shared helpers for the workload tests (imported explicitly; not a conftest)."""

from __future__ import annotations

import functools

from slabench.workload.accounts import load_settings
from slabench.workload.transcripts import GradingItem, generate_call


@functools.cache
def sample_calls(per_account: int = 40) -> tuple[GradingItem, ...]:
    """A fixed spread of calls over every account (seeds 1..per_account), built once per test session."""
    settings = load_settings()
    return tuple(
        generate_call(settings, acct, seed, f"t-{acct}-{seed}")
        for acct in settings.accounts
        for seed in range(1, per_account + 1)
    )
