"""`slabench results upload` against a real S3 API (moto server on 127.0.0.1)."""

from __future__ import annotations

from urllib.parse import unquote

from tests.helpers import weights_helpers
from tests.helpers.weights_helpers import cli, run, s3_client

s3_server, bucket = weights_helpers.s3_server, weights_helpers.bucket  # fixtures


def upload(*args: str):
    return run("results", "upload", *args)


def make_run_dir(root):
    files = {
        "summary.json": b'{"verdict": "PASS"}',
        "report.html": b"<html></html>",
        "plots/ttft.png": b"\x89PNG fake",
        "records/level-01/repeat-1.parquet": bytes(range(256)) * 400,
        "locust.log": b"started\n",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


def test_uploads_every_file_with_its_relative_path(s3_server, bucket, tmp_path):
    files = make_run_dir(tmp_path / "run-42")
    mark = s3_server.mark()
    r = cli(s3_server, "results", "upload", str(tmp_path / "run-42"), f"s3://{bucket}/ci/run-42/")
    assert r.returncode == 0, r.stderr
    client = s3_client()
    listed = {o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]}
    assert listed == {f"ci/run-42/{rel}" for rel in files}
    for rel, data in files.items():
        assert client.get_object(Bucket=bucket, Key=f"ci/run-42/{rel}")["Body"].read() == data
    assert client.head_object(Bucket=bucket, Key="ci/run-42/report.html")["ContentType"] == "text/html"
    assert client.head_object(Bucket=bucket, Key="ci/run-42/plots/ttft.png")["ContentType"] == "image/png"
    for rel in files:
        assert f"uploaded {rel} → s3://{bucket}/ci/run-42/{rel}" in r.stdout
    assert "uploaded 5 files" in r.stdout and f"to s3://{bucket}/ci/run-42/" in r.stdout
    put_paths = {unquote(q.path) for q in s3_server.requests_since(mark, method="PUT")}
    assert put_paths == {f"/{bucket}/ci/run-42/{rel}" for rel in files}


def test_bucket_root_prefix(s3_server, bucket, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.csv").write_text("x,y\n")
    r = upload(str(tmp_path / "d"), f"s3://{bucket}")
    assert r.returncode == 0, r.stderr
    assert [o["Key"] for o in s3_client().list_objects_v2(Bucket=bucket)["Contents"]] == ["a.csv"]


def test_errors_are_one_line(s3_server, bucket, tmp_path):
    make_run_dir(tmp_path / "run")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    cases = [
        ((str(tmp_path / "run"), "s3://no-such-results-bkt/x/"), 3, "bucket 'no-such-results-bkt' does not exist"),
        ((str(tmp_path / "missing"), f"s3://{bucket}/x/"), 3, "missing: no such directory"),
        ((str(tmp_path / "file.txt"), f"s3://{bucket}/x/"), 3, "file.txt: not a directory"),
        ((str(tmp_path / "empty"), f"s3://{bucket}/x/"), 3, "empty: no files to upload"),
        ((str(tmp_path / "run"), "results/"), 3, "'results/' is not an s3:// URL"),
    ]
    for args, code, text in cases:
        r = upload(*args)
        assert r.returncode == code, (args, r.stdout, r.stderr)
        assert text in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert "Contents" not in s3_client().list_objects_v2(Bucket=bucket)
