import pytest
from hypothesis import given
from hypothesis import strategies as st

from slabench.core import metrics
from slabench.core.record import RequestRecord


def rec(**kw) -> RequestRecord:
    return RequestRecord(run_id="r", request_id="x", **kw)


def test_latencies_from_raw_timestamps():
    r = rec(
        scheduled=9.5,
        sent=10.0,
        first_token=10.25,
        last_token=11.25,
        end=11.5,
        completion_tokens=5,
        chunk_times=(10.25, 10.5, 10.75, 11.0, 11.25),
    )
    assert metrics.ttft(r) == 0.25
    assert metrics.ttft_scheduled(r) == 0.75
    assert metrics.e2e(r) == 1.5
    assert metrics.lateness(r) == 0.5
    assert metrics.tpot(r) == 0.25
    assert metrics.itl(r) == [0.25] * 4
    assert metrics.output_tokens_per_s(r) == pytest.approx(5 / 1.5)


def test_itl_spreads_a_multi_token_chunk_over_its_tokens():
    r = rec(chunk_times=(0.0, 0.1, 0.4), chunk_tokens=(1, 1, 3))
    assert metrics.itl(r) == pytest.approx([0.1, 0.1, 0.1, 0.1])
    assert metrics.mean_itl(r) == pytest.approx(0.1)


def test_missing_data_is_none_never_zero():
    r = rec()
    for f in (
        metrics.ttft,
        metrics.ttft_scheduled,
        metrics.e2e,
        metrics.lateness,
        metrics.tpot,
        metrics.mean_itl,
        metrics.output_tokens_per_s,
    ):
        assert f(r) is None
    assert metrics.itl(r) == []
    assert metrics.tpot(rec(first_token=1.0, last_token=1.0, completion_tokens=1)) is None


@given(
    st.lists(st.floats(min_value=0.0001, max_value=2.0), min_size=2, max_size=50), st.integers(min_value=1, max_value=8)
)
def test_itl_tokens_and_time_add_up(gaps, k):
    times = [0.0]
    for g in gaps:
        times.append(times[-1] + g)
    tokens = tuple([1] + [k] * len(gaps))
    r = rec(chunk_times=tuple(times), chunk_tokens=tokens)
    values = metrics.itl(r)
    assert len(values) == k * len(gaps)  # one ITL per token after the first chunk
    assert sum(values) == pytest.approx(times[-1] - times[0])


@given(
    st.lists(st.floats(min_value=0.0, max_value=2.0), min_size=0, max_size=40),
    st.one_of(st.none(), st.lists(st.integers(min_value=0, max_value=6), max_size=45)),
)
def test_mean_itl_is_the_mean_of_the_per_token_values(gaps, counts):
    times = [0.0]
    for g in gaps:
        times.append(times[-1] + g)
    r = rec(chunk_times=tuple(times), chunk_tokens=None if counts is None else tuple(counts))
    values = metrics.itl(r)
    expected = sum(values) / len(values) if values else None
    assert metrics.mean_itl(r) == (None if expected is None else pytest.approx(expected, abs=1e-12))
