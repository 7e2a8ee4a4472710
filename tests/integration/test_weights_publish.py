"""publish against a real S3 API: resumable after a kill, idempotent, refuses silent overwrites, HF cache layout."""

from __future__ import annotations

import json
import os
import signal
import time
from urllib.parse import unquote

from slabench.weights.publish import publish
from slabench.weights.s3 import parse_s3_url
from tests.helpers import weights_helpers
from tests.helpers.weights_helpers import popen, run, s3_client, sha256, write_model
from tests.unit.test_weights_source import COMMIT, hf_cache

s3_server, bucket = weights_helpers.s3_server, weights_helpers.bucket  # fixtures

ROOT = "models/acme/tiny/v1"


def publish_args(bucket: str, src, *extra: str) -> tuple[str, ...]:
    return (
        *("weights", "publish", "--from", str(src), "--to", f"s3://{bucket}/models"),
        *("--model", "acme/tiny", "--revision", "v1", "--progress", "none", *extra),
    )


def keys(bucket: str) -> dict[str, bytes]:
    client = s3_client()
    listed = client.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def puts(requests) -> list[str]:
    """Keys written by PUT/POST (single PUT or multipart), without the query string."""
    return sorted({unquote(r.path) for r in requests if r.method in ("PUT", "POST")})


def test_killed_publish_resumes_without_reuploading_and_hydrates_nothing_meanwhile(s3_server, bucket, tmp_path):
    files = write_model(tmp_path / "snap")
    # 400 KB/s: the 1.9 MB model takes ~5 s, so the kill lands mid-way with some objects complete
    proc = popen(s3_server, *publish_args(bucket, tmp_path / "snap", "--max-bandwidth", "400KB"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(k.endswith("config.json") for k in keys(bucket)):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=10)
    before = keys(bucket)
    assert 0 < len(before) < len(files), before.keys()
    assert f"{ROOT}/.slabench-manifest.json" not in before  # the manifest is the commit point: not there yet

    # Meanwhile a hydrate refuses the half-published revision instead of caching half a model.
    h = run("weights", "hydrate", "--source", f"s3://{bucket}/{ROOT}", "--dest", str(tmp_path / "c"))
    assert h.returncode == 3 and "no manifest" in h.stderr and not (tmp_path / "c").exists()

    mark = s3_server.mark()
    r = run(*publish_args(bucket, tmp_path / "snap"))
    assert r.returncode == 0, r.stderr
    assert f"{len(before)} already present" in r.stdout
    written = puts(s3_server.requests_since(mark))
    assert all(not w.endswith(k[len(ROOT) :]) for w in written for k in before), written  # nothing re-sent
    assert {k: sha256(v) for k, v in keys(bucket).items() if not k.endswith(".json")} == {
        f"{ROOT}/{rel}": sha256(data) for rel, data in files.items() if not rel.endswith(".json")
    }
    h = run("weights", "hydrate", "--source", f"s3://{bucket}/{ROOT}", "--dest", str(tmp_path / "c"))
    assert h.returncode == 0, h.stderr


def test_publishing_the_same_files_again_changes_nothing(s3_server, bucket, tmp_path):
    write_model(tmp_path / "snap")
    assert run(*publish_args(bucket, tmp_path / "snap")).returncode == 0
    manifest_before = keys(bucket)[f"{ROOT}/.slabench-manifest.json"]
    mark = s3_server.mark()
    r = run(*publish_args(bucket, tmp_path / "snap"))
    assert r.returncode == 0, r.stderr
    assert "already holds these files" in r.stdout and "uploaded 0 files" in r.stdout
    assert puts(s3_server.requests_since(mark)) == []
    # byte-identical manifest: host caches keyed on its sha256 stay complete
    assert keys(bucket)[f"{ROOT}/.slabench-manifest.json"] == manifest_before


def test_different_content_for_a_published_revision_is_refused_then_forced(s3_server, bucket, tmp_path):
    files = write_model(tmp_path / "snap")
    assert run(*publish_args(bucket, tmp_path / "snap")).returncode == 0
    before = keys(bucket)

    (tmp_path / "snap" / "config.json").write_text('{"changed": 1}')
    (tmp_path / "snap" / "original" / "params.json").unlink()
    r = run(*publish_args(bucket, tmp_path / "snap"))
    assert r.returncode == 3
    assert f"s3://{bucket}/{ROOT}: already holds a different publish of acme/tiny@v1 (2 files differ" in r.stderr
    assert "--force" in r.stderr and r.stderr.count("\n") == 1
    assert keys(bucket) == before

    r = run(*publish_args(bucket, tmp_path / "snap", "--force"))
    assert r.returncode == 0, r.stderr
    assert "deleted 1 stale objects" in r.stdout
    after = keys(bucket)
    assert f"{ROOT}/original/params.json" not in after
    assert after[f"{ROOT}/config.json"] == b'{"changed": 1}'
    listed = {f["path"] for f in json.loads(after[f"{ROOT}/.slabench-manifest.json"])["files"]}
    assert listed == set(files) - {"original/params.json"}


def test_hugging_face_cache_layout_records_the_commit_and_guards_the_ref(s3_server, bucket, tmp_path):
    repo = hf_cache(tmp_path / "hub")
    r = run(
        *("weights", "publish", "--from", str(tmp_path / "hub"), "--to", f"s3://{bucket}/hf"),
        *("--model", "acme/tiny", "--revision", "main", "--progress", "none"),
    )
    assert r.returncode == 0, r.stderr
    manifest = json.loads(keys(bucket)["hf/acme/tiny/main/.slabench-manifest.json"])
    assert manifest["commit"] == COMMIT and manifest["revision"] == "main"
    assert {f["path"] for f in manifest["files"]} == {"config.json", "original/params.json"}

    # `main` moves to a new commit upstream: publishing it over the old `main` is refused, naming both commits.
    new = "e" * 40
    (repo / "snapshots" / new).mkdir()
    (repo / "snapshots" / new / "config.json").write_text('{"v": 2}')
    (repo / "refs" / "main").write_text(new)
    r = run(
        *("weights", "publish", "--from", str(repo), "--to", f"s3://{bucket}/hf"),
        *("--model", "acme/tiny", "--revision", "main", "--progress", "none"),
    )
    assert r.returncode == 3 and f"commit {COMMIT} is published, this is {new}" in r.stderr


def test_publish_bad_inputs_are_one_line_errors(s3_server, bucket, tmp_path):
    write_model(tmp_path / "snap")
    (tmp_path / "empty").mkdir()
    cases = [
        (publish_args("no-such-bucket-x", tmp_path / "snap"), "bucket 'no-such-bucket-x' does not exist"),
        (publish_args(bucket, tmp_path / "missing"), "no such directory"),
        (publish_args(bucket, tmp_path / "empty"), "no files to publish"),
        (("weights", "publish", "--from", str(tmp_path / "snap"), "--to", "/local", "--model", "m", "--revision", "r"),
         "not an s3:// URL"),
        (("weights", "publish", "--from", str(tmp_path / "snap"), "--to", f"s3://{bucket}", "--model", "../m",
          "--revision", "r"), "--model: '../m' is not a valid model name"),
    ]  # fmt: skip
    for args, message in cases:
        r = run(*args)
        assert r.returncode == 3, (args, r.stdout, r.stderr)
        assert message in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert keys(bucket) == {}


def test_in_process_publish_reports_what_it_did(s3_server, bucket, tmp_path):
    files = write_model(tmp_path / "snap")
    lines: list[str] = []
    to = parse_s3_url(f"s3://{bucket}/m")
    result = publish(tmp_path / "snap", to, "acme/tiny", "v1", progress="none", say=lines.append)
    assert sorted(result.uploaded) == sorted(files) and result.skipped == []
    assert result.uploaded_bytes == sum(len(b) for b in files.values())
    assert str(result.root) == f"s3://{bucket}/m/acme/tiny/v1"
    assert lines[0].startswith("publish: hashing 5 files")
