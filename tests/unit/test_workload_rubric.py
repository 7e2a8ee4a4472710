"""The scoring rule of docs/workload.md: Y=1, N=0, NA excluded, 1–5 → (x−1)/4, weighted, auto-fail → 0, pass ≥ 85."""

from __future__ import annotations

import pytest

from slabench.workload.rubric import MASTER_RUBRIC, RUBRIC_BY_ID, is_autofail, item_value, rubric_for, score_call


def test_master_rubric_matches_workload_md():
    assert [i.id for i in MASTER_RUBRIC] == list(range(1, 27))
    assert sum(i.weight for i in MASTER_RUBRIC if i.id <= 23) == 100  # "scorecards weight items to sum to 100"
    assert {i.id for i in MASTER_RUBRIC if i.autofail} == {2, 4, 10, 17, 26}
    assert [i.id for i in MASTER_RUBRIC if i.scale == "1-5"] == [6, 8, 9, 10, 13, 14]


@pytest.mark.parametrize(("x", "value"), [(1, 0.0), (2, 0.25), (3, 0.5), (4, 0.75), (5, 1.0)])
def test_one_to_five_maps_to_quarters(x, value):
    assert item_value(RUBRIC_BY_ID[6], x) == value
    only = rubric_for([6])
    assert score_call(only, {6: x}, False, 85).overall == pytest.approx(100 * value)


def test_y_n_na_values_and_weighting():
    items = rubric_for([1, 13, 11])  # weights 4, 10, 3
    cs = score_call(items, {1: "N", 13: 4, 11: "NA"}, False, 85)
    assert cs.overall == pytest.approx(100 * (4 * 0 + 10 * 0.75) / (4 + 10))  # NA left out of both sums
    assert cs.autofail == () and cs.passed is False


def test_all_na_has_no_score_rather_than_zero():
    items = rubric_for([11, 12, 17])
    cs = score_call(items, {11: "NA", 12: "NA", 17: "NA"}, False, 85)
    assert cs.overall is None and cs.passed is None and cs.autofail == ()


def test_autofail_zeroes_the_call_and_flags_it():
    items = rubric_for([1, 4, 6, 17])
    good = {1: "Y", 4: "Y", 6: 5, 17: "Y"}
    assert score_call(items, good, False, 85).overall == 100
    cs = score_call(items, {**good, 4: "N"}, False, 85)
    assert (cs.overall, cs.autofail, cs.passed) == (0.0, (4,), False)
    cs = score_call(items, {**good, 4: "N", 17: "N"}, False, 85)
    assert cs.autofail == (4, 17)


def test_courtesy_autofails_only_on_one():
    items = rubric_for([10, 1])
    assert score_call(items, {10: 1, 1: "Y"}, False, 85).autofail == (10,)
    assert score_call(items, {10: 2, 1: "Y"}, False, 85).autofail == ()


def test_recording_disclosure_autofails_only_where_required():
    item = RUBRIC_BY_ID[2]
    assert is_autofail(item, "N", disclosure_required=True)
    assert not is_autofail(item, "N", disclosure_required=False)
    assert not is_autofail(item, "NA", disclosure_required=True)
    items = rubric_for([1, 2])
    assert score_call(items, {1: "Y", 2: "N"}, False, 85).overall == pytest.approx(100 * 4 / 6)
    assert score_call(items, {1: "Y", 2: "N"}, True, 85).overall == 0.0


def test_pass_threshold_is_inclusive():
    items = rubric_for([13, 14])  # weights 10 and 10
    assert score_call(items, {13: 5, 14: 4}, False, 87.5).passed is True  # (1 + 0.75) / 2 = 87.5 exactly
    assert score_call(items, {13: 5, 14: 4}, False, 87.6).passed is False


@pytest.mark.parametrize(
    ("item_id", "value", "ok"),
    [(1, "Y", True), (1, "NA", False), (2, "NA", True), (6, 3, True), (6, 0, False), (6, 6, False),
     (6, True, False), (6, "3", False), (1, "y", False), (1, 1, False)],
)  # fmt: skip
def test_allowed_values_per_scale(item_id, value, ok):
    assert RUBRIC_BY_ID[item_id].allows(value) is ok
