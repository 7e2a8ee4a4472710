"""Snapshot layouts publish reads: plain directories and the Hugging Face cache (symlinks into blobs/)."""

from __future__ import annotations

import os
import sys

import pytest

from slabench.core.errors import UserError
from slabench.weights.source import fetch_from_hugging_face, list_files, resolve_snapshot

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hf_cache(hub, model="acme/tiny", commits=(COMMIT,), ref=COMMIT):
    """A Hugging Face hub cache as huggingface_hub lays it out: blobs, refs/main, snapshot symlinks."""
    repo = hub / ("models--" + model.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(ref)
    for i, commit in enumerate(commits):
        snap = repo / "snapshots" / commit
        (snap / "original").mkdir(parents=True)
        for rel, data in {"config.json": b"{}", "original/params.json": f"{i}".encode()}.items():
            blob = repo / "blobs" / f"blob{i}-{rel.replace('/', '_')}"
            blob.write_bytes(data)
            os.symlink(os.path.relpath(blob, (snap / rel).parent), snap / rel)
    return repo


def test_plain_directory_has_no_commit(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert resolve_snapshot(tmp_path, "acme/tiny", "v1") == (tmp_path, None)


@pytest.mark.parametrize("start", ["hub", "repo", "snapshot"])
def test_hf_cache_resolves_ref_to_commit_from_any_level(tmp_path, start):
    repo = hf_cache(tmp_path / "hub")
    snap = repo / "snapshots" / COMMIT
    path = {"hub": tmp_path / "hub", "repo": repo, "snapshot": snap}[start]
    revision = COMMIT if start == "snapshot" else "main"
    assert resolve_snapshot(path, "acme/tiny", revision) == (snap, COMMIT)
    files = dict(list_files(snap))
    assert sorted(files) == ["config.json", "original/params.json"]
    assert files["original/params.json"].read_bytes() == b"0"  # followed through the symlink


def test_hf_cache_accepts_a_snapshot_sha_as_revision(tmp_path):
    other = "f" * 40
    repo = hf_cache(tmp_path / "hub", commits=(COMMIT, other))
    assert resolve_snapshot(repo, "acme/tiny", other) == (repo / "snapshots" / other, other)


def test_hf_cache_unknown_revision_lists_what_exists(tmp_path):
    repo = hf_cache(tmp_path / "hub")
    with pytest.raises(UserError, match=r"'v9' is neither a ref \(main\) nor a snapshot \(0123"):
        resolve_snapshot(repo, "acme/tiny", "v9")


def test_missing_directory(tmp_path):
    with pytest.raises(UserError, match="no such directory"):
        resolve_snapshot(tmp_path / "nope", "acme/tiny", "v1")


def test_list_files_skips_bookkeeping_and_refuses_broken_links(tmp_path):
    for rel in ["config.json", ".git/HEAD", ".cache/huggingface/x.lock", ".slabench/lock", "sub/w.bin"]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    (tmp_path / ".slabench-manifest.json").write_text("{}")
    assert [rel for rel, _ in list_files(tmp_path)] == ["config.json", "sub/w.bin"]
    os.symlink(tmp_path / "gone", tmp_path / "model.safetensors")
    with pytest.raises(UserError, match="broken symlink"):
        list_files(tmp_path)


def test_list_files_refuses_an_empty_directory(tmp_path):
    with pytest.raises(UserError, match="no files to publish"):
        list_files(tmp_path)


def test_hf_download_without_huggingface_hub_says_how_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # makes the import fail as if not installed
    with pytest.raises(UserError, match=r"huggingface_hub is not installed .* pass --from DIR"):
        fetch_from_hugging_face("acme/tiny", "main", tmp_path)
