"""`slabench dataset build/verify/stats` as a user runs them: a real process, real files."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slabench.workload.cli import main

DATASETS = Path(__file__).resolve().parents[2] / "datasets"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "slabench.workload.cli", "dataset", *args], capture_output=True, text=True, timeout=120
    )


def test_committed_dataset_verifies_byte_for_byte():
    p = _run("verify", "--dir", str(DATASETS))
    assert p.returncode == 0, p.stderr
    for name in ("golden.jsonl", "queue_burst.csv", "queue_gamma.csv", "manifest.json"):
        assert f"{name}: ok" in p.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("built") / "ds"
    p = _run("build", "--out", str(out))
    assert p.returncode == 0, p.stderr
    return out


def test_same_seed_same_bytes(built, tmp_path):
    assert main(["dataset", "build", "--out", str(tmp_path / "again")]) == 0
    for f in built.iterdir():
        assert (tmp_path / "again" / f.name).read_bytes() == f.read_bytes(), f.name
    # and the committed files are that same build
    for f in built.iterdir():
        assert (DATASETS / f.name).read_bytes() == f.read_bytes(), f.name
    manifest = json.loads((built / "manifest.json").read_text())
    assert manifest["counts"]["burst"]["A"] == 6000 and manifest["files"]["golden.jsonl"]["lines"] == 250
    assert "estimate_tokens" in manifest["token_estimator"]


@pytest.mark.parametrize(
    ("name", "edit"),
    [
        ("golden.jsonl", lambda b: b.replace(b"Thank you for calling", b"Thanks for calling", 1)),
        ("queue_burst.csv", lambda b: b[:-2] + (b"1" if b[-2:-1] != b"1" else b"2") + b"\n"),  # the last seed
        ("queue_gamma.csv", lambda b: b[:-1]),
        ("manifest.json", lambda b: b.replace(b'"lines": 250', b'"lines": 251')),
    ],
)
def test_verify_fails_loudly_naming_the_edited_file(built, tmp_path, name, edit):
    d = tmp_path / "ds"
    shutil.copytree(built, d)
    data = (d / name).read_bytes()
    (d / name).write_bytes(edit(data))
    assert (d / name).read_bytes() != data
    p = _run("verify", "--dir", str(d))
    assert p.returncode == 3
    assert "dataset verification failed" in p.stderr and f"{d / name}: differs from what seed" in p.stderr
    assert "first difference at line" in p.stderr
    assert p.stderr.count("differs") == 1  # only the edited file is blamed
    assert "Traceback" not in p.stderr


def test_verify_reports_a_missing_file_and_a_missing_manifest(built, tmp_path):
    d = tmp_path / "ds"
    shutil.copytree(built, d)
    (d / "queue_burst.csv").unlink()
    p = _run("verify", "--dir", str(d))
    assert p.returncode == 3 and f"{d / 'queue_burst.csv'}: missing" in p.stderr
    (d / "manifest.json").unlink()
    p = _run("verify", "--dir", str(d))
    assert p.returncode == 3 and "manifest.json: file not found" in p.stderr


def test_verify_notices_other_settings(built, tmp_path):
    cfg = tmp_path / "tuned.yaml"
    src = (Path(__file__).resolve().parents[2] / "slabench/workload/assumptions.yaml").read_text()
    cfg.write_text(src.replace("pass_threshold: 85", "pass_threshold: 80"))
    p = _run("verify", "--dir", str(built), "--config", str(cfg))
    assert p.returncode == 3 and "settings_sha256" in p.stderr


def test_stats_reports_lengths_arrivals_and_the_estimator(built, tmp_path, capsys):
    png = tmp_path / "stats.png"
    assert main(["dataset", "stats", "--dir", str(built), "--limit", "600", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "token counts: slabench.core.tokens.estimate_tokens" in out
    assert "burst n=20,000" in out and "gamma n=20,000" in out and "100 ms peak" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert main(["dataset", "stats", "--dir", str(built), "--limit", "300", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["token_estimator"].startswith("slabench.core.tokens.estimate_tokens")
    lengths = {r["account"]: r for r in report["lengths"]}
    assert set(lengths) == {"A", "B", "C", "D", "E", "F", "all"}
    assert set(lengths["all"]["prompt_tokens"]["verbose"]) == {"p10", "p50", "p90", "p99"}
    assert report["arrivals"]["burst"]["count"] == 20000


def test_bad_flags_are_user_errors(tmp_path):
    p = _run("stats", "--dir", str(tmp_path / "nowhere"))
    assert p.returncode == 3 and "file not found" in p.stderr and "Traceback" not in p.stderr
    p = _run("build", "--out", str(tmp_path / "x"), "--seed", "-4")
    assert p.returncode == 3 and "--seed" in p.stderr
