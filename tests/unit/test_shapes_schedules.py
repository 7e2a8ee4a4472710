"""The pure schedule functions behind the load shapes: stage boundaries, repeat order, arrivals, the diurnal curve,
partitions. No sleeps, no Locust."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from slabench.core.errors import UserError
from slabench.core.queue import check_offsets
from slabench.shapes.schedules import (
    OFFICE_DAY,
    Diurnal,
    Span,
    _invert_linear,
    curve_rate,
    parse_curve,
    parse_levels,
    parse_rates,
    partition,
    plan_end,
    rate_arrivals,
    span_at,
    step_plan,
    stride_indices,
)


# -- parsing -------------------------------------------------------------------------------------------------------
def test_levels_parse():
    assert parse_levels("1,2,4,8,16,32,64") == (1, 2, 4, 8, 16, 32, 64)
    assert parse_levels(" 3 , 5") == (3, 5)


@pytest.mark.parametrize("bad", ["0", "-1", "1,x", "1.5", "", "1,,2", "2,0"])
def test_levels_that_are_not_positive_integers_are_user_errors(bad):
    with pytest.raises(UserError, match=r"positive integer|no levels"):
        parse_levels(bad)


def test_rates_and_curve_parse_and_reject():
    assert parse_rates("0.5,2") == (0.5, 2.0)
    for bad in ("0", "-1", "x", "inf", "nan"):
        with pytest.raises(UserError, match="rate > 0"):
            parse_rates(bad)
    assert parse_curve("0:0,12:1,24:0") == ((0, 0), (12, 1), (24, 0))
    for bad in ("0:0,24", "1:0,24:1", "0:0,12:1,12:1,24:0", "0:1,23:1", "0:-1,24:1", "0:0,24:0"):
        with pytest.raises(UserError):
            parse_curve(bad)


# -- stepped plans ---------------------------------------------------------------------------------------------------
def test_stage_boundaries_are_exact():
    plan = step_plan([1, 2], warmup=2, hold=5, cooldown=1)
    assert [(s.start, s.end, s.level, s.repeat, s.phase) for s in plan] == [
        (0, 2, 1, 0, "warmup"),
        (2, 7, 1, 0, "hold"),
        (7, 8, 1, 0, "cooldown"),
        (8, 10, 2, 0, "warmup"),
        (10, 15, 2, 0, "hold"),
        (15, 16, 2, 0, "cooldown"),
    ]
    assert span_at(plan, -1.0).phase == "warmup"  # before the start: the first span
    assert span_at(plan, 1.999999).phase == "warmup"
    assert span_at(plan, 2.0).phase == "hold"
    assert span_at(plan, 7.0).phase == "cooldown"
    assert span_at(plan, 8.0).level == 2
    assert span_at(plan, 15.999).phase == "cooldown"
    assert span_at(plan, 16.0) is None
    assert plan_end(plan) == 16


def test_plan_is_contiguous_and_every_level_repeat_has_one_hold():
    plan = step_plan([1, 2, 4], warmup=3, hold=10, cooldown=2, idle=4, repeats=3)
    for a, b in itertools.pairwise(plan):
        assert a.end == b.start
    holds = [(s.level, s.repeat) for s in plan if s.phase == "hold"]
    assert sorted(holds) == sorted((lv, r) for lv in (1, 2, 4) for r in range(3))
    assert all(s.users == 0 for s in plan if s.phase == "idle")
    assert all(s.users == s.level for s in plan if s.phase != "idle")


def test_repeat_orders():
    sweep = [(s.level, s.repeat) for s in step_plan([1, 2], 1, 1, repeats=2, order="sweep") if s.phase == "hold"]
    level = [(s.level, s.repeat) for s in step_plan([1, 2], 1, 1, repeats=2, order="level") if s.phase == "hold"]
    assert sweep == [(1, 0), (2, 0), (1, 1), (2, 1)]
    assert level == [(1, 0), (1, 1), (2, 0), (2, 1)]
    across_runs = step_plan([1, 2], 1, 1, repeats=2, repeat_start=4)
    assert {s.repeat for s in across_runs} == {4, 5}


def test_zero_length_phases_are_left_out():
    plan = step_plan([8], warmup=0, hold=5, cooldown=0)
    assert [(s.phase, s.start, s.end) for s in plan] == [("hold", 0, 5)]


@pytest.mark.parametrize(
    "kw",
    [
        {"hold": 0},
        {"hold": -1},
        {"warmup": -1},
        {"cooldown": math.nan},
        {"repeats": 0},
        {"repeat_start": -1},
        {"order": "random"},
    ],
)
def test_step_plan_rejects_bad_arguments(kw):
    args = {"levels": [1], "warmup": 1, "hold": 1} | kw
    with pytest.raises(UserError):
        step_plan(**args)


# -- rate arrivals -------------------------------------------------------------------------------------------------
def test_rate_arrivals_are_reproducible_per_seed():
    plan = step_plan([5.0], warmup=0, hold=20)
    a = [x.offset for x in rate_arrivals(plan, 1.0, seed=7)]
    b = [x.offset for x in rate_arrivals(plan, 1.0, seed=7)]
    c = [x.offset for x in rate_arrivals(plan, 1.0, seed=8)]
    assert a == b
    assert a != c


@pytest.mark.parametrize("burstiness", [1.0, 0.25, 4.0])
def test_rate_arrivals_have_the_rate_and_the_burstiness(burstiness):
    rate, hold = 50.0, 400.0
    arrivals = rate_arrivals(step_plan([rate], warmup=0, hold=hold), burstiness, seed=1)
    n = len(arrivals)
    assert abs(n - rate * hold) < 5 * math.sqrt(rate * hold / burstiness)  # ~5 sd of a renewal count
    gaps = np.diff([a.offset for a in arrivals])
    cv = gaps.std() / gaps.mean()
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.1)  # Gamma(k): CV = 1/√k


def test_rate_arrivals_stay_inside_their_spans_and_skip_idle():
    plan = step_plan([2.0, 20.0], warmup=1, hold=3, cooldown=1, idle=2, repeats=2)
    arrivals = rate_arrivals(plan, 1.0, seed=3)
    assert all(a.span.start <= a.offset < a.span.end for a in arrivals)
    assert all(a.span.phase != "idle" for a in arrivals)
    assert all(x.offset <= y.offset for x, y in itertools.pairwise(arrivals))
    per_level = {lv: sum(1 for a in arrivals if a.span.level == lv) for lv in (2.0, 20.0)}
    assert per_level[20.0] > 3 * per_level[2.0]


# -- the diurnal curve -----------------------------------------------------------------------------------------------
def test_curve_rate_interpolates_and_wraps():
    assert curve_rate(OFFICE_DAY, 10.5) == 1.0
    assert curve_rate(OFFICE_DAY, 3.0) == 0.0
    assert curve_rate(OFFICE_DAY, 8.0) == pytest.approx((0.12 + 0.7) / 2)
    assert curve_rate(OFFICE_DAY, 34.5) == 1.0  # 34.5 h is 10:30 the next day
    assert curve_rate(OFFICE_DAY, 24.0) == 0.03


def test_diurnal_expected_count_is_the_integral():
    day = Diurnal(curve=((0, 0.0), (12, 1.0), (24, 0.0)), peak_rps=10, day_s=240)
    assert day.cumulative(day.duration) == pytest.approx(0.5 * 10 * 240)  # a triangle
    assert day.cumulative(120) == pytest.approx(0.25 * 10 * 240)
    spans = day.plan()
    assert len(spans) == 24
    assert spans[11].level == pytest.approx(10 * 11.5 / 12)  # the mean over hour 11–12
    assert sum(s.level * (s.end - s.start) for s in spans) == pytest.approx(1200)


def test_diurnal_arrivals_follow_the_curve():
    day = Diurnal(curve=OFFICE_DAY, peak_rps=40, day_s=600, days=2)
    arrivals = day.arrivals(1.0, seed=5)
    expected = day.cumulative(day.duration)
    assert abs(len(arrivals) - expected) < 5 * math.sqrt(expected)
    hour_s = day.day_s / 24
    night = [a for a in arrivals if 1.0 <= day.hour_at(a.offset) < 5.0]
    assert night == []  # the trough is zero: nothing to keep a fleet awake
    # per simulated hour (both days pooled), counts track the hour's expected count
    for h in range(24):
        got = sum(1 for a in arrivals if int(day.hour_at(a.offset)) == h)
        want = 2 * (day.cumulative((h + 1) * hour_s) - day.cumulative(h * hour_s))
        assert abs(got - want) < 5 * math.sqrt(want) + 1
    assert {a.span.repeat for a in arrivals} == {0, 1}
    assert [a.offset for a in day.arrivals(1.0, seed=5)] == [a.offset for a in arrivals]


def test_diurnal_start_hour_shifts_the_day():
    day = Diurnal(curve=OFFICE_DAY, peak_rps=10, day_s=240, start_hour=9.0)
    assert day.rate_at(0) == pytest.approx(7.0)  # 09:00 → 0.7 × peak
    assert day.rate_at(240 * 1.5 / 24) == pytest.approx(10.0)  # 10:30
    spans = day.plan()
    assert spans[0].start == 0 and spans[-1].end == pytest.approx(240)
    assert len(spans) == 24


def test_diurnal_rejects_bad_settings():
    for kw in ({"peak_rps": 0}, {"day_s": -1}, {"days": 0}, {"start_hour": 24}):
        with pytest.raises(UserError):
            Diurnal(**({"curve": OFFICE_DAY, "peak_rps": 1, "day_s": 60} | kw))


@given(
    r0=st.floats(0, 100),
    r1=st.floats(0, 100),
    length=st.floats(0.01, 100),
    frac=st.floats(0, 1),
)
@example(r0=0.0, r1=0.5, length=3.0, frac=5e-324)  # a rate from zero and a sliver of area (hypothesis found it)
@example(r0=5e-324, r1=0.5, length=3.0, frac=5e-324)  # ... from a rate whose square underflows
def test_invert_linear_inverts_the_integral(r0, r1, length, frac):
    area = (r0 + r1) * length / 2
    c = frac * area
    tau = _invert_linear(r0, r1, length, c)
    assert 0 <= tau <= length
    if area > 1e-9:
        integral = r0 * tau + (r1 - r0) * tau * tau / (2 * length)
        assert integral == pytest.approx(c, rel=1e-6, abs=1e-9 * max(area, 1))


# -- queues and partitions -------------------------------------------------------------------------------------------
def test_offsets_must_be_sorted_non_negative_and_finite():
    check_offsets([0.0, 0.0, 1.5, 2])
    with pytest.raises(UserError, match=r"q\.csv:3: offset 0\.5 is earlier"):
        check_offsets([0.0, 1.0, 0.5], where=["q.csv:1", "q.csv:2", "q.csv:3"])
    with pytest.raises(UserError, match="negative"):
        check_offsets([-0.1])
    with pytest.raises(UserError, match="negative or not a number"):
        check_offsets([0.0, math.nan])
    with pytest.raises(UserError, match="empty"):
        check_offsets([])


def test_stride_keeps_the_rate_by_default():
    assert stride_indices(100, 10) == range(0, 100, 10)
    assert stride_indices(100, 0.5) == range(0, 100, 1)  # slowed down: every item
    assert stride_indices(100, 10, stride=1) == range(100)
    assert stride_indices(100, 2.6) == range(0, 100, 3)
    for bad in (0, -1, math.inf, math.nan):
        with pytest.raises(UserError, match="time-scale"):
            stride_indices(100, bad)
    with pytest.raises(UserError, match="stride"):
        stride_indices(100, 1, stride=-2)


@pytest.mark.parametrize("n_workers", range(1, 9))
@pytest.mark.parametrize("n_items", [0, 1, 7, 8, 9, 1000, 20000])
def test_partition_sends_every_item_exactly_once(n_workers, n_items):
    shares = [list(partition(n_items, w, n_workers)) for w in range(n_workers)]
    flat = [i for s in shares for i in s]
    assert sorted(flat) == list(range(n_items))  # no gaps
    assert len(flat) == len(set(flat))  # no duplicates
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1
    for s in shares:  # each worker's share spans the whole schedule, in order
        assert s == sorted(s)
        if len(s) > 1:
            assert s[-1] >= n_items - n_workers


@given(n_items=st.integers(0, 5000), n_workers=st.integers(1, 64))
def test_partition_is_exact_for_any_size(n_items, n_workers):
    seen = [0] * n_items
    for w in range(n_workers):
        for i in partition(n_items, w, n_workers):
            seen[i] += 1
    assert seen == [1] * n_items


def test_partition_rejects_a_worker_outside_the_count():
    with pytest.raises(ValueError):
        partition(10, 2, 2)
    with pytest.raises(ValueError):
        partition(10, 0, 0)


def test_span_users_for_replayed_queues_are_zero():
    assert Span(0, 1, None, 0, "hold").users == 0


def test_an_open_loop_waits_for_requests_while_they_keep_finishing():
    from slabench.shapes.base import drain_expired

    assert not drain_expired(t=250, last_due=197, drain_timeout=300, since_last_record=0.2)  # before the limit
    assert not drain_expired(t=900, last_due=197, drain_timeout=300, since_last_record=1.0)  # still finishing
    assert drain_expired(t=900, last_due=197, drain_timeout=300, since_last_record=301)  # stuck
    assert not drain_expired(t=400, last_due=197, drain_timeout=300, since_last_record=400)  # limit not reached
