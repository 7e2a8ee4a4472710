"""`slabench plan --compare-search`: the plan's highest passing concurrency beside a measured search's — the bracket
logic by hand, the plan's own bisection on a profile whose answer is known, and bad search directories refused in
one line (exit 3)."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from slabench.core.errors import UserError
from slabench.plan.checks import Check
from slabench.plan.search import PLAN_ENGINE
from slabench.plan.versus_search import (
    Comparison,
    ComparisonView,
    PlannedSearch,
    answer_text,
    level_passes,
    plan_search,
    read_searched_sweep,
    within,
)
from slabench.sim.profiles import load_profile
from slabench.sweep.search import Search
from tests.fuzz.registry import _compare_search, _search_tree


def bracket(passed: int | None, failed: int | None, low: int = 1, high: int = 16) -> Search:
    return Search(low, high, 1, passed, failed)


def test_the_answer_reads_as_a_number_or_beyond_the_range():
    assert answer_text(bracket(5, 6)) == "5"
    assert answer_text(bracket(None, 1)) == "< 1"
    assert answer_text(bracket(16, None)) == "≥ 16"


@pytest.mark.parametrize(
    ("measured", "pessimistic", "optimistic", "agree"),
    [
        ((5, 6), (4, 5), (7, 8), True),  # 5 within 4…7
        ((8, 9), (4, 5), (7, 8), False),  # 8 above 7
        ((3, 4), (4, 5), (7, 8), False),  # 3 below 4
        ((4, 7), (6, 7), (9, 10), True),  # a wide bracket (tolerance 3): 4…6 reaches the interval's 6
        ((None, 1), (None, 1), (2, 3), True),  # none passes, and the slow end says so too
        ((16, None), (9, 10), (16, None), True),  # every level passes, and the fast end too
        ((16, None), (9, 10), (12, 13), False),  # every level passes, the plan says 12 at best
    ],
)
def test_within_compares_the_brackets(measured, pessimistic, optimistic, agree):
    assert within(bracket(*measured), bracket(*pessimistic), bracket(*optimistic)) is agree


def test_the_plans_bisection_finds_the_batch_edge(tmp_path: Path):
    """l4 with --max-num-seqs 2, 64-token prompts and 24-token answers: one or two users are each served at once
    (TTFT one prefill, tens of ms); a third waits for a whole answer (24 decode steps), so a TTFT p95 ceiling of
    0.25 s passes 2 users and fails 3, and the bisection over 1–6 lands there: 1, 6, 3, 2."""
    searched = read_searched_sweep(_search_tree(tmp_path).parent)
    n = 40
    mix = replace(
        searched.mix,
        prompt_tokens=np.full(n, 64),
        output_tokens=np.full(n, 24),
        prefix_tokens=np.zeros(n, dtype=np.int64),
        accounts=tuple(f"r{i}" for i in range(n)),
        max_tokens=24,
    )
    searched = replace(searched, low=1, high=6, tolerance=1, mix=mix, requests=n, duration_s=None)
    config = load_profile("l4", "llama-3.2-3b", engine={"max_num_seqs": 2, **PLAN_ENGINE})
    ttft = [Check("ttft_p95_s", "ttft_p95", "ttft", 0.95, 0.25, "critical")]
    assert level_passes(config, searched, 2, ttft)[0]
    ok, why = level_passes(config, searched, 3, ttft)
    assert not ok and why.startswith("ttft_p95_s ")
    found = plan_search(config, searched, ttft)
    assert [s.level for s in found.search.steps] == [1, 6, 3, 2]
    assert (found.search.passed, found.search.failed) == (2, 3)


def test_a_search_directory_compares_and_writes_compare_json(tmp_path: Path):
    path = _search_tree(tmp_path)
    code, err = _compare_search(path)
    assert code == 0, err
    doc = json.loads((tmp_path / "compare" / "compare.json").read_text())
    assert doc["kind"] == "slabench.plan_vs_search"
    assert doc["measured"] == {"highest_passing": 1, "lowest_failing": 2, "range": [1, 2], "tolerance": 1}
    (plan,) = doc["plans"]
    assert plan["profile"] == "l4" and [s["level"] for s in plan["steps"]][:2] == [1, 2]


def _edit(path: Path, **fields: object) -> None:
    doc = json.loads(path.read_text())
    doc.update(fields)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda p: p.unlink(), "no search.json in it"),
        (lambda p: p.write_text("{"), "search.json: not JSON"),
        (lambda p: _edit(p, kind="slabench.sweep"), "not a search result"),
        (lambda p: _edit(p, range=[2, 1]), "range must be [low, high]"),
        (lambda p: _edit(p, tolerance=0), "tolerance ≥ 1"),
        (lambda p: _edit(p, highest_passing=9), "highest_passing: 9"),
        (lambda p: _edit(p, highest_passing=2, lowest_failing=1), "is not below lowest_failing"),
        (lambda p: (p.parent / "sweep.json").unlink(), "sweep.json: missing or unreadable"),
    ],
)
def test_a_bad_search_directory_is_one_line_exit_3(tmp_path: Path, damage, says):
    path = _search_tree(tmp_path)
    damage(path)
    with pytest.raises(UserError) as e:
        read_searched_sweep(path.parent)
    assert says in str(e.value) and "\n" not in str(e.value)
    code, err = _compare_search(path)
    lines = [line for line in err.splitlines() if line.startswith("slabench: ")]
    assert code == 3 and len(lines) == 1 and says in lines[0], err


def test_the_table_reads_at_80_columns_with_the_longest_profile_name(tmp_path: Path):
    searched = read_searched_sweep(_search_tree(tmp_path).parent)
    searched = replace(searched, low=1, high=128, tolerance=4, passed=None, failed=1)
    name = "rtx-pro-6000-mig-2g.48gb"
    ends = [PlannedSearch(Search(1, 128, 4, p, f)) for p, f in ((97, 101), (64, 68), (128, None))]
    view = ComparisonView(searched, "a-contract-with-a-long-name", [Comparison(name, 2.5, *ends)])
    con = Console(file=io.StringIO(), width=80, record=True, color_system=None)
    con.print(view)
    lines = con.export_text().splitlines()
    assert max(map(len, lines)) <= 80, "\n".join(lines)
    (row,) = [ln for ln in lines if name in ln and "│" in ln]  # the profile's name whole, on one table row
    assert "97" in row and "90 %: 64 to ≥ 128" in row
    assert any("< 1" in ln for ln in lines)  # no level passed: below the range
    text = " ".join(" ".join(lines).split())
    assert "lies outside the plan's 90 % interval" in text and f"slabench calibrate {searched.path}" in text


@pytest.mark.parametrize("extra", [["--load", "rate", "--rate-rps", "1"], ["--autoscale"], ["--queue", "q.csv"]])
def test_a_load_beside_compare_search_is_refused_in_one_line(tmp_path: Path, extra: list[str]):
    from tests.fuzz.registry import cli

    path = _search_tree(tmp_path)
    code, err = cli(["plan", "--compare-search", str(path.parent), "--profiles", "l4", *extra])
    lines = [line for line in err.splitlines() if line.startswith("slabench: ")]
    assert code == 3 and len(lines) == 1 and "--compare-search replays the search's own runs" in lines[0], err
