"""The fleet row of the per-pod scraper (slabench.evidence.pod_scrape.Fleet): each pod's increments summed, its
restarts and late arrivals counted as the single-server scraper counts a restart, and totals whose last-minus-first is
exactly what the replicas did (what the accounting and the cross-check read)."""

from __future__ import annotations

from typing import Any

from slabench.evidence.accounting import server_received
from slabench.evidence.crosscheck import counter_delta, histogram_delta
from slabench.evidence.pod_scrape import Fleet
from slabench.evidence.scrape import RECEIVED


def snap(received: float, running: float, kv: float, ttft_count: float = 0.0) -> dict[str, Any]:
    return {
        "gauges": {"num_requests_running": running, "kv_cache_usage_perc": kv},
        "counters": {RECEIVED: received},
        "histograms": {
            "time_to_first_token_seconds": {
                "count": ttft_count,
                "sum": ttft_count * 0.1,
                "buckets": {"0.5": ttft_count, "+Inf": ttft_count},
            }
        },
    }


def rows(*steps: tuple[set[str], dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    fleet = Fleet()
    return [fleet.step(listed, snaps) for listed, snaps in steps]


def test_each_pods_increments_are_summed_and_gauges_are_the_fleets():
    out = rows(
        ({"a", "b"}, {"a": snap(100, 0, 0.0, 50), "b": snap(40, 0, 0.0, 20)}),  # warm-up before the run
        ({"a", "b"}, {"a": snap(103, 2, 0.2, 53), "b": snap(45, 4, 0.6, 25)}),
        ({"a", "b"}, {"a": snap(110, 0, 0.0, 60), "b": snap(50, 0, 0.0, 30)}),
    )
    assert out[0]["counters"][RECEIVED] == 140 and out[0]["deltas"][RECEIVED] == 0  # the baseline: nothing yet
    assert [r["deltas"][RECEIVED] for r in out[1:]] == [8, 12]
    assert out[1]["gauges"] == {"num_requests_running": 6, "kv_cache_usage_perc": 0.4}  # a share: the mean
    assert server_received(out) == 20  # 10 + 10: not one replica's count, nor a random mix of both
    assert counter_delta(out[0], out[-1], RECEIVED) == 20
    ttft = histogram_delta(out[0], out[-1], "time_to_first_token_seconds")
    assert ttft is not None and ttft["count"] == 20 and ttft["buckets"] == {"0.5": 20, "+Inf": 20}


def test_a_restarted_pod_counts_its_new_value_and_the_totals_never_fall():
    out = rows(
        ({"a", "b"}, {"a": snap(100, 0, 0), "b": snap(40, 0, 0)}),
        ({"a", "b"}, {"a": snap(105, 0, 0), "b": snap(3, 0, 0)}),  # b restarted: 3 since its restart
    )
    assert out[1]["deltas"][RECEIVED] == 8
    assert out[1]["counters"][RECEIVED] == 148  # the single-server reset rule would read the fall as a restart
    assert server_received(out) == 8


def test_a_pod_that_appears_mid_run_counts_from_zero_a_late_read_of_a_known_pod_is_its_baseline():
    out = rows(
        ({"a", "b"}, {"a": snap(100, 0, 0)}),  # b listed but not read yet
        ({"a", "b", "c"}, {"a": snap(104, 0, 0), "b": snap(60, 0, 0), "c": snap(5, 1, 0)}),  # c: a replacement
        ({"a", "b", "c"}, {"a": snap(104, 0, 0), "b": snap(62, 0, 0), "c": snap(9, 0, 0)}),
    )
    # a: 4; b: baseline 60 (its pre-run work is not the run's), then 2; c: all of its 9
    assert [r["deltas"][RECEIVED] for r in out] == [0, 9, 6]
    assert server_received(out) == 15


def test_a_pod_missing_from_one_scrape_is_counted_at_its_next():
    out = rows(
        ({"a", "b"}, {"a": snap(0, 0, 0), "b": snap(0, 0, 0)}),
        ({"a", "b"}, {"a": snap(5, 1, 0)}),  # b did not answer this time
        ({"a", "b"}, {"a": snap(6, 0, 0), "b": snap(7, 0, 0)}),
    )
    assert [r["deltas"][RECEIVED] for r in out] == [0, 5, 8]
    assert out[1]["gauges"]["num_requests_running"] == 1  # only the pods read in this scrape
