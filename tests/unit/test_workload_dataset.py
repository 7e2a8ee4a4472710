"""Loading the committed dataset, and what a corrupt or hand-edited row, a missing file or an unknown account or
rubric item looks like to the user: one error naming file, line and field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from slabench.core.errors import UserError
from slabench.workload import build_item, item_from_ref, item_ref, load_golden, load_queue
from slabench.workload.accounts import load_settings
from slabench.workload.dataset import resolve_dir
from slabench.workload.transcripts import GradingItem, generate_call

DATASETS = Path(__file__).resolve().parents[2] / "datasets"
S = load_settings()


def test_committed_golden_and_queues_load():
    golden = load_golden(DATASETS)
    assert len(golden) == 250
    counts = {k: sum(c.account == k for c in golden) for k in S.accounts}
    assert counts == {"A": 75, "B": 55, "C": 40, "D": 35, "E": 25, "F": 20}
    assert len({c.item_id for c in golden}) == 250
    for kind in ("burst", "gamma"):
        q = load_queue(DATASETS, kind)
        assert len(q) == 20000 and q[0].kind == kind and q[7].item_id == f"{kind}-00007"


def test_default_dir_works_from_any_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_dir("datasets") == DATASETS
    assert len(load_queue()) == 20000


def test_build_item_rebuilds_golden_calls_from_their_seed_and_queue_items_on_demand():
    golden = load_golden(DATASETS)
    for c in golden[::25]:
        assert generate_call(S, c.account, c.seed, c.item_id) == c  # the stored row is exactly what the seed makes
        assert build_item(c) is c
    q = load_queue(DATASETS)[123]
    item = build_item(q)
    assert isinstance(item, GradingItem) and item.item_id == "burst-00123" and item.account == q.account
    assert build_item(q) == item


@pytest.fixture
def ds(tmp_path) -> Path:
    d = tmp_path / "ds"
    shutil.copytree(DATASETS, d)
    return d


def _edit_golden(d: Path, line: int, edit) -> None:
    path = d / "golden.jsonl"
    lines = path.read_text(encoding="utf-8").split("\n")
    row = json.loads(lines[line - 1])
    edit(row)
    lines[line - 1] = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
    path.write_text("\n".join(lines), encoding="utf-8")


def _raise(d: Path, loader=load_golden) -> str:
    with pytest.raises(UserError) as e:
        loader(d)
    return str(e.value)


def _first_scale_item(row):
    return next(k for k, v in row["scores"].items() if isinstance(v, int))


@pytest.mark.parametrize(
    ("edit", "field", "says"),
    [
        (lambda r: r["scores"].update({_first_scale_item(r): 1 + r["scores"][_first_scale_item(r)] % 5}), "overall",
         "does not follow from the scores"),
        (lambda r: r.update(account="Z"), "account", "unknown account 'Z'"),
        (lambda r: r["scores"].update({"27": "Y"}), "scores.27", "unknown rubric item 27"),
        (lambda r: r["scores"].update({"1": "maybe"}), "scores.1", "not a valid score for item 1"),
        (lambda r: r["scores"].pop("1"), "scores", "items 1 of account"),
        (lambda r: r.update(transcript=r["transcript"].replace("Agent:", "Agent: Hello!", 1)), "transcript",
         "the transcript was edited"),
        (lambda r: r.update(seed="twelve"), "seed", "Input should be a valid integer"),
        (lambda r: r.update(passed=not r["passed"]), "passed", "does not follow"),
        (lambda r: r.update(colour="blue"), "colour", "unknown key"),
        (lambda r: r.update(intent="haircut"), "intent", "unknown intent"),
    ],
)  # fmt: skip
def test_hand_edited_golden_row_names_file_line_and_field(ds, edit, field, says):
    _edit_golden(ds, 17, edit)
    msg = _raise(ds)
    assert msg.startswith(f"{ds / 'golden.jsonl'}:17: {field}: ") and says in msg, msg


def test_rubric_item_not_on_the_accounts_scorecard(ds):
    line = next(n for n, c in enumerate(load_golden(DATASETS), 1) if c.account == "C")
    _edit_golden(ds, line, lambda r: r["scores"].update({"26": "NA"}))
    assert f"golden.jsonl:{line}: scores.26: item 26 is not on account C's scorecard" in _raise(ds)


def test_corrupt_golden_line(ds):
    path = ds / "golden.jsonl"
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[4] = lines[4][: len(lines[4]) // 2]  # a half-written row
    path.write_text("\n".join(lines), encoding="utf-8")
    assert _raise(ds).startswith(f"{path}:5: not valid JSON")


def test_a_valid_looking_edit_is_caught_by_the_manifest(ds):
    _edit_golden(ds, 3, lambda r: r.update(seed=r["seed"] + 1))  # consistent row, wrong content
    assert "sha256 differs from" in _raise(ds) and "golden.jsonl" in _raise(ds)


def test_missing_file(ds):
    (ds / "queue_gamma.csv").unlink()
    msg = _raise(ds, lambda d: load_queue(d, "gamma"))
    assert "queue_gamma.csv: file not found" in msg and "slabench dataset build" in msg


def test_a_manifest_that_is_not_an_object_is_one_line(ds):
    (ds / "manifest.json").write_text("null\n", encoding="utf-8")
    msg = _raise(ds)
    assert msg.startswith(f"{ds / 'manifest.json'}: not a JSON object") and "slabench dataset build" in msg


def _edit_queue(d: Path, line: int, new: str) -> Path:
    path = d / "queue_burst.csv"
    lines = path.read_text().split("\n")
    lines[line - 1] = new
    path.write_text("\n".join(lines))
    return path


@pytest.mark.parametrize(
    ("line", "new", "says"),
    [
        (1, "index,account,offset,seed", "1: header: expected index,account,offset_s,seed"),
        (10, "9,A,1.800000,123", "10: index: expected 8 (rows are numbered from 0 in order), got 9"),
        (10, "8,Q,1.800000,123", "10: account: unknown account 'Q'"),
        (10, "8,A,fast,123", "10: offset_s: 'fast' is not a number"),
        (10, "8,A,200.5,123", "10: offset_s: 200.5 is outside the queue window [0, 195)"),
        (10, "8,A,-1,123", "10: offset_s: -1 is outside the queue window"),
        (10, "8,A,0.000001,123", "10: offset 1e-06 is earlier than the previous one"),
        (10, "8,A,1.8,-5", "10: seed: '-5' is not a non-negative integer"),
        (10, "8,A,1.8", "10: every row of the dataset's queue needs its account and seed"),
    ],
)
def test_hand_edited_queue_row_names_file_line_and_field(ds, line, new, says):
    path = _edit_queue(ds, line, new)
    assert f"{path}:{says}" in _raise(ds, load_queue)


def test_unknown_queue_kind():
    with pytest.raises(UserError, match="unknown queue kind 'poisson'"):
        load_queue(DATASETS, "poisson")


def test_item_refs_rebuild_golden_and_queue_calls():
    golden = load_golden(DATASETS)[42]
    assert item_from_ref(item_ref(golden)) == golden
    q = load_queue(DATASETS, "gamma")[9]
    assert item_ref(q) == f"gamma-00009|{q.account}|{q.seed}"
    assert item_from_ref(item_ref(q)) == build_item(q)
    for bad in ("", "x|A", "x|A|seed", "|A|1"):
        with pytest.raises(UserError, match="item reference"):
            item_from_ref(bad)
    with pytest.raises(UserError, match="unknown account 'Q'"):
        item_from_ref("x|Q|1")
