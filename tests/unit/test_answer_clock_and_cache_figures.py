"""The figures of a reasoning model's second clock (`ttft_answer_*`) and of the server's prefix cache
(`cache_hit_ratio`), from records as the client writes them — and none from records that cannot say."""

from __future__ import annotations

import pytest

from slabench.analysis.columns import run_arrays, table_from_records
from slabench.analysis.figures import metric_values
from slabench.core.record import RequestRecord


def record(i: int, answer_after: float | None = 0.5, cached: int | None = None, **kw) -> RequestRecord:
    sent = 10.0 * i
    first = sent + 0.1
    return RequestRecord(
        run_id="r",
        request_id=f"q{i}",
        wall_sent=1e9 + sent,
        sent=sent,
        first_token=first,
        first_answer_token=None if answer_after is None else first + answer_after,
        last_token=first + 1.0,
        end=first + 1.0,
        chunk_times=(first, first + 1.0),
        prompt_tokens=100,
        completion_tokens=20,
        cached_tokens=cached,
        **kw,
    )


def figures(records: list[RequestRecord]) -> dict:
    return metric_values([run_arrays(table_from_records(records))])


def test_the_answer_clock_is_a_figure_family_beside_ttft():
    f = figures([record(i, answer_after=0.1 * (i + 1)) for i in range(5)])
    assert f["ttft_p50"].value == pytest.approx(0.1)
    assert f["ttft_answer_p50"].value == pytest.approx(0.1 + 0.3)  # after the reasoning: 0.1 … 0.5 s more
    assert f["ttft_answer_mean"].samples == 5 and f["ttft_answer_p99"].value <= 0.6 + 1e-9


def test_records_without_the_answer_clock_give_no_figure_rather_than_a_wrong_one():
    assert not any(k.startswith("ttft_answer") for k in figures([record(i, answer_after=None) for i in range(3)]))


def test_the_cache_hit_ratio_is_over_the_requests_whose_server_said():
    f = figures([record(0, cached=80), record(1, cached=0), record(2, cached=None)])
    assert f["cache_hit_ratio"].value == pytest.approx(80 / 200)
    assert "cache_hit_ratio" not in figures([record(0), record(1)])
