"""Host cache bookkeeping: the lock, atomic state files, stat-based change detection."""

from __future__ import annotations

import os

import pytest

from slabench.weights import local
from slabench.weights.s3 import OperationFailed


def test_lock_excludes_a_second_holder_and_is_released_on_exit(tmp_path):
    messages = []
    with local.cache_lock(tmp_path) as waited:
        assert waited is False
        assert local.is_locked(tmp_path)
        assert local.lock_holder(tmp_path) == os.getpid()
        # flock is per open file description: a second open in this process contends like another process.
        with (
            pytest.raises(OperationFailed, match=r"still locked by pid \d+ after 0.3 s"),
            local.cache_lock(tmp_path, timeout_s=0.3, on_wait=messages.append),
        ):
            pass
    assert len(messages) == 1 and "another hydrate" in messages[0]
    assert not local.is_locked(tmp_path)
    with local.cache_lock(tmp_path, timeout_s=0) as waited:
        assert waited is False


def test_changed_files_sees_writes_truncation_replacement_and_removal(tmp_path):
    names = ["a", "b", "c", "d", "e"]
    for n in names:
        (tmp_path / n).write_bytes(b"12345")
    recorded = {n: local.stat_record(tmp_path / n) for n in names}
    assert local.changed_files(tmp_path, recorded) == []
    with open(tmp_path / "a", "r+b") as f:  # same size, in place
        f.write(b"X")
    os.truncate(tmp_path / "b", 2)
    (tmp_path / "c.new").write_bytes(b"12345")
    os.replace(tmp_path / "c.new", tmp_path / "c")  # same size, new inode
    os.unlink(tmp_path / "d")
    assert local.changed_files(tmp_path, recorded) == ["a", "b", "c", "d"]


def test_marker_round_trip_and_source_must_match(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"w")
    local.state_dir(tmp_path).mkdir()
    files = {"w.bin": local.stat_record(tmp_path / "w.bin")}
    local.write_marker(tmp_path, {"source": "s3://b/p", "manifest_sha256": "x", "files": files})
    assert local.complete_marker_for(tmp_path, "s3://b/p")["manifest_sha256"] == "x"
    assert local.complete_marker_for(tmp_path, "s3://b/other") is None
    local.remove_marker(tmp_path)
    assert local.complete_marker_for(tmp_path, "s3://b/p") is None


def test_torn_or_foreign_state_files_read_as_unknown(tmp_path):
    local.state_dir(tmp_path).mkdir()
    (local.state_dir(tmp_path) / "complete.json").write_text('{"schema_version": 1, "files": ')
    assert local.read_marker(tmp_path) is None
    (local.state_dir(tmp_path) / "complete.json").write_text('{"schema_version": 99, "files": {}}')
    assert local.read_marker(tmp_path) is None
    (local.state_dir(tmp_path) / "verified.json").write_text("[1, 2]")
    assert local.read_journal(tmp_path) == {}


def test_atomic_write_leaves_no_temp_file(tmp_path):
    local.write_json_atomic(tmp_path / "s.json", {"a": 1})
    local.write_json_atomic(tmp_path / "s.json", {"a": 2})
    assert local.read_json(tmp_path / "s.json") == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["s.json"]
    assert (tmp_path / "s.json").stat().st_mode & 0o777 == 0o644
