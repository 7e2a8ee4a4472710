"""Bad input and hostile conditions: one clear line, a non-zero exit, and nothing corrupt or partial left visible."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import weights_helpers
from tests.helpers.weights_helpers import REPO, run, s3_client, visible_files, write_model

s3_server, bucket = weights_helpers.s3_server, weights_helpers.bucket  # fixtures

SHARD = "model-00001-of-00002.safetensors"  # 1.2 MB


@pytest.fixture
def source(s3_server, bucket, tmp_path) -> tuple[dict[str, bytes], str]:
    files = write_model(tmp_path / "snap")
    r = run(
        *("weights", "publish", "--from", str(tmp_path / "snap"), "--to", f"s3://{bucket}/models"),
        *("--model", "acme/tiny", "--revision", "v1", "--progress", "none"),
    )
    assert r.returncode == 0, r.stderr
    return files, f"s3://{bucket}/models/acme/tiny/v1"


def hydrate(source: str, dest: Path, *extra: str):
    return run("weights", "hydrate", "--source", source, "--dest", str(dest), "--progress", "none", *extra)


def one_line(r, code: int, text: str) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert text in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("slabench: ") and "Traceback" not in r.stderr


def assert_not_complete(dest: Path, files: dict[str, bytes]) -> None:
    """Whatever is visible is a whole, verified file; no marker claims completeness; no temp files linger."""
    assert all(files.get(rel) == data for rel, data in visible_files(dest).items())
    assert not (dest / ".slabench" / "complete.json").exists()
    assert not (dest / ".slabench" / "tmp").exists()


def test_wrong_bucket_and_missing_manifest_touch_nothing_locally(s3_server, source, tmp_path):
    _, src = source
    dest = tmp_path / "cache"
    one_line(hydrate("s3://no-such-bucket-here/models/acme/tiny/v1", dest), 3, "bucket 'no-such-bucket-here' does not")
    one_line(hydrate(src.replace("/v1", "/v2"), dest), 3, "no manifest — nothing is published at")
    assert not dest.exists()


def test_malformed_inputs(s3_server, source, tmp_path):
    _, src = source
    (tmp_path / "a-file").write_text("x")
    one_line(hydrate("/mnt/models/acme", tmp_path / "c"), 3, "--source: '/mnt/models/acme' is not an s3:// URL")
    one_line(hydrate(src, tmp_path / "a-file"), 3, "exists and is not a directory")
    r = hydrate(src, tmp_path / "c", "--chunk-size", "lots")
    assert r.returncode == 3 and "not a size: 'lots'" in r.stderr


def test_garbage_and_hostile_manifests_are_refused(s3_server, bucket, source, tmp_path):
    _, src = source
    key = "models/acme/tiny/v1/.slabench-manifest.json"
    good = s3_client().get_object(Bucket=bucket, Key=key)["Body"].read()

    s3_client().put_object(Bucket=bucket, Key=key, Body=b"<html>not json</html>")
    one_line(hydrate(src, tmp_path / "c1"), 1, "the manifest is not valid JSON")

    hostile = json.loads(good)
    hostile["files"][0]["path"] = "../../escaped.json"
    s3_client().put_object(Bucket=bucket, Key=key, Body=json.dumps(hostile).encode())
    one_line(hydrate(src, tmp_path / "deep" / "c2"), 1, "unsafe or reserved file path '../../escaped.json'")
    assert not (tmp_path / "escaped.json").exists() and not (tmp_path / "deep").exists()


def test_checksum_mismatch_in_s3_keeps_the_bad_file_out_then_repairs_when_fixed(s3_server, bucket, source, tmp_path):
    files, src = source
    key = f"models/acme/tiny/v1/{SHARD}"
    corrupt = bytearray(files[SHARD])
    corrupt[1000] ^= 0xFF  # one flipped byte, same size: only the sha256 can tell
    s3_client().put_object(Bucket=bucket, Key=key, Body=bytes(corrupt))
    dest = tmp_path / "cache"
    r = hydrate(src, dest)
    one_line(r, 1, f"{src}/{SHARD}: checksum mismatch")
    assert "re-publish" in r.stderr
    assert SHARD not in visible_files(dest)
    assert_not_complete(dest, files)

    s3_client().put_object(Bucket=bucket, Key=key, Body=files[SHARD])  # the operator re-publishes
    r = hydrate(src, dest)
    assert r.returncode == 0, r.stderr
    assert visible_files(dest) == files


def test_object_listed_but_missing_in_s3(s3_server, bucket, source, tmp_path):
    files, src = source
    s3_client().delete_object(Bucket=bucket, Key="models/acme/tiny/v1/tokenizer.json")
    dest = tmp_path / "cache"
    one_line(hydrate(src, dest), 1, f"{src}/tokenizer.json: listed in the manifest but missing in S3")
    assert_not_complete(dest, files)


def test_not_enough_free_space_is_refused_before_downloading(s3_server, bucket, source, tmp_path):
    files, src = source
    dest = tmp_path / "cache"
    mark = s3_server.mark()
    one_line(hydrate(src, dest, "--keep-free", "1000TB"), 1, "not enough disk space — need 1.92 MB more plus 1000")
    data_gets = [r for r in s3_server.requests_since(mark) if r.method == "GET" and "manifest" not in r.path]
    assert data_gets == []
    assert visible_files(dest) == {}
    assert_not_complete(dest, files)


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str):
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); the --keep-free and "
                    "RLIMIT_FSIZE tests cover the same code paths")  # fmt: skip
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)  # lazy: a just-exited child may still hold it


def test_a_real_volume_too_small_for_the_model(s3_server, source, tmp_path):
    """A 1 MiB tmpfs (a real filesystem with a real statfs) cannot take the 1.9 MB model."""
    files, src = source
    with small_tmpfs(tmp_path / "small", "1m") as mnt:
        dest = mnt / "models" / "acme" / "tiny" / "v1"
        one_line(hydrate(src, dest), 1, "not enough disk space — need 1.92 MB more")
        assert visible_files(dest) == {}
        assert_not_complete(dest, files)


def test_disk_filling_up_mid_download_leaves_no_partial_file(s3_server, source, tmp_path):
    """RLIMIT_FSIZE on the hydrate process: writes past 1 MB fail with EFBIG, exactly where ENOSPC would strike.

    (The free-space pre-check passes here, so this exercises the mid-write failure path.)
    """
    files, src = source
    dest = tmp_path / "cache"
    limit = 1_000_000  # < the 1.2 MB shard, > every other file

    def cap_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, **s3_server.env(), "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [sys.executable, "-m", "slabench", "weights", "hydrate", "--source", src, "--dest", str(dest)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=cap_file_size,
    )
    one_line(r, 1, "File too large")
    assert SHARD not in visible_files(dest)
    assert_not_complete(dest, files)

    r = hydrate(src, dest)
    assert r.returncode == 0, r.stderr
    assert visible_files(dest) == files
