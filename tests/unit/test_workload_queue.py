"""The 20k burst queue and its Gamma(k=0.25) control, against the figures in docs/workload.md."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from slabench.core.queue import QueueItem
from slabench.workload.accounts import load_settings
from slabench.workload.golden import build_golden
from slabench.workload.queue import account_counts, build_queue
from slabench.workload.stats import arrival_stats, peak_window_count, per_second_counts

S = load_settings()


@functools.cache
def queue(kind: str):
    return build_queue(S, S.seed, kind)


@pytest.mark.parametrize("kind", ["burst", "gamma"])
def test_exactly_20000_sorted_arrivals_in_the_window(kind):
    q = queue(kind)
    assert len(q) == 20000
    assert [it.index for it in q] == list(range(20000))
    offsets = [it.offset_s for it in q]
    assert offsets == sorted(offsets) and offsets[0] >= 0 and offsets[-1] < 195
    assert all(round(o, 6) == o for o in offsets)  # stored as written


@pytest.mark.parametrize("kind", ["burst", "gamma"])
def test_account_shares_within_one_percent_of_spec(kind):
    stats = arrival_stats(queue(kind), 195)
    for key, acct in S.accounts.items():
        assert abs(stats.account_shares[key] - acct.share) <= 0.01 * acct.share


def test_rows_without_an_account_get_their_own_share():
    rows = [QueueItem(0, 0.5, "A"), QueueItem(1, 1.0), QueueItem(2, 1.5, "A")]
    assert arrival_stats(rows, 2).account_shares == pytest.approx({"(no account)": 1 / 3, "A": 2 / 3})


def test_burst_figures_near_workload_md():
    """docs/workload.md: per-second p50 ~75, p99 ~330, 100 ms peaks near 750 req/s, inter-arrival CV ~7.6."""
    a = arrival_stats(queue("burst"), 195)
    assert a.mean_rate == pytest.approx(20000 / 195)
    assert 75 * 0.75 <= a.per_second_p50 <= 75 * 1.25
    assert 330 * 0.75 <= a.per_second_p99 <= 330 * 1.25
    assert 750 * 0.75 <= a.peak_100ms_rate <= 750 * 1.25
    assert 7.6 * 0.75 <= a.interarrival_cv <= 7.6 * 1.25


def test_gamma_control_is_smooth_at_one_second_and_bursty_below():
    """Gamma(k) gaps have CV 1/sqrt(k) = 2 for k = 0.25; at one-second scale the counts stay near the mean."""
    g = arrival_stats(queue("gamma"), 195)
    b = arrival_stats(queue("burst"), 195)
    assert g.interarrival_cv == pytest.approx(2.0, rel=0.1)
    assert g.mean_rate == b.mean_rate
    assert g.per_second_p99 < 0.6 * b.per_second_p99 and g.per_second_p50 > b.per_second_p50


def test_seeds_are_unique_across_golden_and_both_queues_and_reproducible():
    taken: set[int] = set()
    golden = build_golden(S, S.seed, taken)
    q1 = build_queue(S, S.seed, "burst", taken)
    q2 = build_queue(S, S.seed, "gamma", taken)
    seeds = [c.seed for c in golden] + [i.seed for i in q1] + [i.seed for i in q2]
    assert len(set(seeds)) == len(seeds) == 40250
    assert q1 == queue("burst") and q2 == queue("gamma")
    assert build_queue(S, S.seed + 1, "burst") != q1


def test_account_counts_are_exact():
    assert account_counts(S, 20000) == {"A": 6000, "B": 4400, "C": 3200, "D": 2800, "E": 2000, "F": 1600}
    for total in (1, 7, 99, 12345):
        counts = account_counts(S, total)
        assert sum(counts.values()) == total
        assert all(abs(counts[k] - a.share * total) < 1 for k, a in S.accounts.items())


def test_window_helpers():
    assert list(per_second_counts([0.0, 0.5, 1.0, 2.99], 3)) == [2, 1, 1]
    assert peak_window_count([0.0, 0.05, 0.099, 0.1, 0.5], 0.1) == 3
    assert peak_window_count([], 0.1) == 0
    assert arrival_stats([], 195).per_second_p50 is None
    counts = per_second_counts(np.array([it.offset_s for it in queue("burst")]), 195)
    assert counts.sum() == 20000 and len(counts) == 195
