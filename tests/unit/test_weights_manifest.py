"""The manifest: path safety, consistency checks, canonical bytes, hashing."""

from __future__ import annotations

import hashlib
import json
import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slabench.core.errors import UserError
from slabench.weights.manifest import (
    SCHEMA_VERSION,
    FileEntry,
    Manifest,
    build_manifest,
    check_model_name,
    check_relpath,
    check_revision,
    diff,
    digest,
    parse_manifest,
)
from slabench.weights.s3 import OperationFailed

SHA_A = "a" * 64
SHA_B = "b" * 64


def manifest(files: list[tuple[str, int, str]], **kw) -> Manifest:
    return Manifest(
        schema_version=kw.pop("schema_version", SCHEMA_VERSION),
        model="acme/tiny",
        revision="v1",
        created="2026-01-01T00:00:00Z",
        total_bytes=kw.pop("total_bytes", sum(s for _, s, _ in files)),
        files=tuple(FileEntry(path=p, size=s, sha256=h) for p, s, h in files),
        **kw,
    )


@pytest.mark.parametrize("path", ["config.json", "original/params.json", "a/b/c.safetensors", "x..y", ".gitattributes"])
def test_relpath_accepts_plain_relative_paths(path):
    assert check_relpath(path) == path


@pytest.mark.parametrize(
    "path",
    ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a\\b", "a\0b", ".slabench/complete.json",
     ".slabench-manifest.json", "a/"],
)  # fmt: skip
def test_relpath_rejects_escapes_and_reserved_names(path):
    with pytest.raises(ValueError, match="unsafe or reserved"):
        check_relpath(path)


@given(st.lists(st.sampled_from(["a", "b", "..", ".", "", "c.bin", "/", "\\"]), min_size=1, max_size=6))
def test_accepted_paths_never_leave_the_cache_directory(segments):
    path = "/".join(segments)
    try:
        check_relpath(path)
    except ValueError:
        return
    resolved = posixpath.normpath(posixpath.join("/cache", path))
    assert resolved.startswith("/cache/") and resolved != "/cache"


def test_manifest_refuses_duplicates_file_dir_clash_bad_total_and_newer_schema():
    with pytest.raises(ValueError, match="listed twice"):
        manifest([("a", 1, SHA_A), ("a", 1, SHA_A)])
    with pytest.raises(ValueError, match="both a file and a directory"):
        manifest([("a", 1, SHA_A), ("a/b", 1, SHA_B)])
    with pytest.raises(ValueError, match="total_bytes"):
        manifest([("a", 1, SHA_A)], total_bytes=2)
    with pytest.raises(ValueError, match="upgrade slabench"):
        manifest([("a", 1, SHA_A)], schema_version=SCHEMA_VERSION + 1)


def test_manifest_json_round_trips_and_unknown_fields_are_ignored():
    m = manifest([("a", 1, SHA_A), ("d/b", 2, SHA_B)], commit="abc123")
    raw = m.to_json_bytes()
    assert parse_manifest(raw, "x") == m
    assert digest(raw) == hashlib.sha256(raw).hexdigest()
    newer = json.loads(raw) | {"added_in_a_later_version": True}
    assert parse_manifest(json.dumps(newer).encode(), "x") == m


def test_parse_manifest_errors_are_one_line_and_name_the_field():
    with pytest.raises(OperationFailed, match=r"^s3://b/m: the manifest is not valid JSON") as e:
        parse_manifest(b"{nope", "s3://b/m")
    assert "\n" not in str(e.value)
    bad = json.loads(manifest([("a", 1, SHA_A)]).to_json_bytes())
    bad["files"][0]["path"] = "../../etc/cron.d/x"
    with pytest.raises(OperationFailed, match=r"files\.0\.path: .*unsafe") as e:
        parse_manifest(json.dumps(bad).encode(), "s3://b/m")
    assert "\n" not in str(e.value)


def test_same_content_and_diff_ignore_time_and_name():
    a = manifest([("a", 1, SHA_A), ("b", 1, SHA_B)])
    b = a.model_copy(update={"created": "2030-01-01T00:00:00Z", "revision": "v2"})
    assert a.same_content(b) and diff(a, b) == []
    c = manifest([("a", 1, SHA_B), ("c", 1, SHA_B)])
    assert not a.same_content(c)
    assert diff(a, c) == ["a", "b", "c"]


def test_build_manifest_hashes_every_file(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "w.bin").write_bytes(b"weights" * 1000)
    (tmp_path / "sub" / "t.json").write_bytes(b"{}")
    (tmp_path / "empty").write_bytes(b"")
    files = [("w.bin", tmp_path / "w.bin"), ("sub/t.json", tmp_path / "sub" / "t.json"), ("empty", tmp_path / "empty")]
    m = build_manifest(files, "acme/tiny", "v1", commit=None, workers=2)
    assert [f.path for f in m.files] == ["empty", "sub/t.json", "w.bin"]
    assert m.by_path()["w.bin"].sha256 == hashlib.sha256(b"weights" * 1000).hexdigest()
    assert m.by_path()["empty"].size == 0
    assert m.total_bytes == 7000 + 2


@pytest.mark.parametrize("name", ["meta-llama/Llama-3.1-8B-Instruct", "tiny", "a/b/c", "Qwen/Qwen2.5-7B_x"])
def test_model_names_accepted(name):
    assert check_model_name(name) == name


@pytest.mark.parametrize("name", ["", "/abs", "a//b", "a/../b", "a/..", "a b", "-x", "a/"])
def test_model_names_rejected_with_a_fix(name):
    with pytest.raises(UserError, match=r"--model: .* e\.g\. meta-llama/"):
        check_model_name(name)


@pytest.mark.parametrize("rev", ["main", "v1.0", "0123456789abcdef0123456789abcdef01234567"])
def test_revisions_accepted(rev):
    assert check_revision(rev) == rev


@pytest.mark.parametrize("rev", ["", "a/b", "..", "refs/pr/1", " main"])
def test_revisions_rejected(rev):
    with pytest.raises(UserError, match="--revision"):
        check_revision(rev)
