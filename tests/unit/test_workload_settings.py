"""The workload's assumptions file: loads, matches docs/workload.md, and rejects mistakes with file and line."""

from __future__ import annotations

import re

import pytest

from slabench.core.errors import UserError
from slabench.workload.accounts import DEFAULT_SETTINGS, load_settings


def test_packaged_settings_match_workload_md():
    s = load_settings()
    sizes = {k: len(a.rubric) for k, a in s.accounts.items()}
    assert sizes == {"A": 22, "B": 14, "C": 12, "D": 18, "E": 20, "F": 26}  # F: 23 + 3 card-compliance items
    assert {k: a.share for k, a in s.accounts.items()} == {
        "A": 0.3,
        "B": 0.22,
        "C": 0.16,
        "D": 0.14,
        "E": 0.1,
        "F": 0.08,
    }
    assert sum(a.golden for a in s.accounts.values()) == 250
    assert (s.queue.total, s.queue.duration_s, s.queue.gamma_shape, s.pass_threshold) == (20000, 195, 0.25, 85)
    assert {k: (a.minutes_median, a.tokens_per_minute) for k, a in s.accounts.items()}["F"] == (9.0, 160)


def _write(tmp_path, old: str, new: str):
    text = DEFAULT_SETTINGS.read_text()
    assert old in text
    p = tmp_path / "settings.yaml"
    p.write_text(text.replace(old, new, 1))
    return p


def _line_of(path, needle: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    ("old", "new", "expect"),
    [
        ("rubric: [1, 2, 3, 4, 5, 6, 7, 9, 10, 13, 14, 16, 20, 22]", "rubric: [1, 2, 3, 27]", "unknown rubric item 27"),
        ("intents: {return: 4,", "intents: {returns: 4,", "unknown intent 'returns'"),
        ("share: 0.30", "share: 0.31", "shares must sum to 1"),
        ("    vertical: apparel", "    vertical: apparel\n    colour: blue", "unknown key"),
        ("yes_base: {1: 0.9,", "yes_base: {1: 0.9, 4: 0.9,", "item 4"),
    ],
)
def test_mistakes_name_file_line_and_field(tmp_path, old, new, expect):
    p = _write(tmp_path, old, new)
    with pytest.raises(UserError) as e:
        load_settings(p)
    msg = str(e.value)
    assert expect in msg
    assert msg.startswith(f"{p}:") and re.match(rf"{re.escape(str(p))}:\d+: ", msg)


def test_unknown_rubric_item_points_at_its_line(tmp_path):
    p = _write(tmp_path, "rubric: [1, 3, 4, 5, 6, 9, 10, 13, 14, 15, 16, 22]", "rubric: [1, 3, 4, 99]")
    with pytest.raises(UserError, match=rf":{_line_of(p, '[1, 3, 4, 99]')}: accounts.C.rubric"):
        load_settings(p)


def test_missing_file():
    with pytest.raises(UserError, match="file not found"):
        load_settings("/nonexistent/assumptions.yaml")
