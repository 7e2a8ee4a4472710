"""Cliff detection on hand-made per-level estimates."""

import pytest

from slabench.analysis.cliff import CliffOptions, find_cliff
from slabench.analysis.summary import Estimate


def est(mean, half=None, n=3):
    """An estimate with a symmetric interval of ± half (None: no interval, as with one repeat)."""
    if mean is None:
        return Estimate(mean=None, n=0, samples=0, low_samples=True)
    lo, hi = (None, None) if half is None else (mean - half, mean + half)
    return Estimate(mean=mean, std=half, n=n, ci95_low=lo, ci95_high=hi, pooled=mean, samples=500)


def levels(lat, thr):
    return [
        (lv, {"ttft_p95": est(*a), "throughput_rps": est(*b)})
        for lv, a, b in zip([1, 2, 4, 8, 16][: len(lat)], lat, thr, strict=True)
    ]


LINEAR = [(10, 0.5), (20, 0.5), (40, 0.5), (80, 0.5), (160, 0.5)]


def test_latency_cliff_with_separated_intervals():
    lat = [(0.10, 0.01), (0.11, 0.01), (0.12, 0.01), (0.40, 0.02), (0.90, 0.05)]
    c = find_cliff(levels(lat, LINEAR))
    assert c["status"] == "found" and c["reason"] == "latency"
    assert (c["level"], c["last_good_level"]) == (8, 4)
    # trend through levels 1 and 2: 0.10 + 0.01/level → 0.17 at level 8; 0.40 ≥ 1.5 × 0.17
    cand = c["latency"]["candidates"][0]
    assert cand["trend"] == pytest.approx(0.17) and cand["ratio_to_trend"] == pytest.approx(0.40 / 0.17)
    assert "between 4 and 8 users" in c["message"]


def test_overlapping_intervals_do_not_make_a_cliff():
    # levels 4 and 8 are ~2× their trend (0.13, 0.17), but each interval overlaps the one below: not called
    lat = [(0.10, 0.01), (0.11, 0.01), (0.25, 0.15), (0.35, 0.20)]
    c = find_cliff(levels(lat, LINEAR[:4]))
    assert c["status"] == "inconclusive" and c["level"] is None
    assert [x["level"] for x in c["latency"]["candidates"]] == [4, 8]
    assert all(not x["called"] for x in c["latency"]["candidates"])
    assert "overlap" in c["message"]


def test_throughput_plateau():
    lat = [(0.1, 0.01)] * 5
    thr = [(10, 0.3), (19.5, 0.4), (38, 0.6), (41, 0.8), (40, 1.0)]
    c = find_cliff(levels(lat, thr))
    # 4 → 8 doubles the users; the bar is 38 − 0.6 = 37.4 × 1.5 = 56.1 and 41 + 0.8 is far below it
    assert c["status"] == "found" and c["reason"] == "throughput" and c["level"] == 8
    assert c["throughput"]["candidates"][0]["linear_gain"] == 2.0


def test_the_lower_of_two_cliffs_wins():
    lat = [(0.1, 0.01), (0.1, 0.01), (0.1, 0.01), (0.1, 0.01), (0.5, 0.01)]
    thr = [(10, 0.3), (20, 0.4), (21, 0.3), (21, 0.3), (21, 0.3)]
    c = find_cliff(levels(lat, thr))
    assert (c["status"], c["level"], c["reason"]) == ("found", 4, "throughput")
    assert c["latency"]["status"] == "found" and c["latency"]["level"] == 16


def test_no_cliff_when_everything_scales():
    c = find_cliff(levels([(0.1, 0.01)] * 5, LINEAR))
    assert c["status"] == "none" and c["level"] is None
    assert c["latency"]["candidates"] == [] and c["throughput"]["candidates"] == []


def test_one_repeat_never_calls_a_cliff():
    lat = [(0.1, None), (0.1, None), (1.0, None)]
    c = find_cliff(levels(lat, [(10, None), (20, None), (20, None)]))
    assert c["status"] == "inconclusive"
    assert all("fewer than 2 repeats" in x["why"] for x in c["latency"]["candidates"])


def test_an_empty_level_is_skipped_and_its_neighbours_compared():
    lat = [(0.10, 0.01), (0.11, 0.01), (None,), (0.50, 0.02)]
    thr = [(10, 0.5), (20, 0.5), (None,), (80, 0.5)]
    c = find_cliff(levels(lat, thr))
    assert c["status"] == "found" and c["level"] == 8 and c["last_good_level"] == 2


def test_too_few_levels():
    c = find_cliff(levels([(0.1, 0.01)], [(10, 0.5)]))
    assert c["status"] == "too_few_levels"
    two = find_cliff(levels([(0.1, 0.01), (0.5, 0.01)], [(10, 0.5), (20, 0.5)]))
    assert two["latency"]["status"] == "too_few_levels" and two["throughput"]["status"] == "none"
    assert find_cliff([])["status"] == "too_few_levels"


def test_options_change_the_metric_and_threshold():
    lat = [(0.10, 0.005), (0.10, 0.005), (0.13, 0.005)]
    assert find_cliff(levels(lat, LINEAR[:3]))["status"] == "none"  # 0.13 < 1.5 × 0.10 (a flat trend)
    c = find_cliff(levels(lat, LINEAR[:3]), CliffOptions(latency_ratio=1.2))  # 0.13 ≥ 0.12, [0.125, 0.135] clear
    assert c["status"] == "found" and c["level"] == 4


def test_latency_that_grows_along_its_trend_is_not_a_cliff():
    # closed-loop users whose prefills line up: TTFT grows with the level, then jumps when requests queue
    lat = [(0.089, 0.005), (0.150, 0.004), (0.286, 0.003), (0.560, 0.003), (2.238, 0.06)]
    c = find_cliff(levels(lat, LINEAR))
    # trend: 0.089 + 0.061/level → 0.272 at 4, 0.516 at 8 (both < 1.5×), 1.004 at 16 (2.2×: called)
    assert [x["level"] for x in c["latency"]["candidates"]] == [16]
    assert c["status"] == "found" and c["level"] == 16 and c["last_good_level"] == 8


def test_a_rate_sweeps_cliff_is_named_in_requests_per_second():
    lat = [(0.10, 0.01), (0.11, 0.01), (0.12, 0.01), (0.40, 0.02)]
    rates = [(rate, m) for rate, (_, m) in zip((0.5, 1, 2.5, 5), levels(lat, LINEAR[:4]), strict=True)]
    message = find_cliff(rates, unit="req/s")["message"]
    assert message.startswith("cliff between 2.5 and 5 req/s"), message
