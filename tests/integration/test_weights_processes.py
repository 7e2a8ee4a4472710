"""Real processes on one host cache: a hydrate killed mid-download, and two pods hydrating the same path at once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from urllib.parse import unquote

from tests.helpers import weights_helpers
from tests.helpers.weights_helpers import popen, run, visible_files, write_model

s3_server, bucket = weights_helpers.s3_server, weights_helpers.bucket  # fixtures


def published(bucket: str, tmp_path: Path) -> tuple[dict[str, bytes], str]:
    files = write_model(tmp_path / "snap")
    r = run(
        *("weights", "publish", "--from", str(tmp_path / "snap"), "--to", f"s3://{bucket}/models"),
        *("--model", "acme/tiny", "--revision", "v1", "--progress", "none"),
    )
    assert r.returncode == 0, r.stderr
    return files, f"s3://{bucket}/models/acme/tiny/v1"


def hydrate_args(source: str, dest: Path, *extra: str, chunk: str = "128KB") -> tuple[str, ...]:
    return ("weights", "hydrate", "--source", source, "--dest", str(dest), "--chunk-size", chunk, *extra)


def wait_for_partial_download(dest: Path, proc, timeout: float = 30) -> None:
    """Until a temp file with some bytes exists: the hydrate holds the lock and is mid-download."""
    deadline = time.monotonic() + timeout
    tmp = dest / ".slabench" / "tmp"
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if tmp.is_dir() and any(p.stat().st_size > 0 for p in tmp.iterdir() if p.is_file()):
            return
        time.sleep(0.01)
    raise AssertionError("the hydrate never started writing")


def data_gets(requests, bucket: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in requests:
        path = unquote(r.path)
        if r.method == "GET" and path.startswith(f"/{bucket}/") and not path.endswith(".slabench-manifest.json"):
            out[path] = out.get(path, 0) + 1
    return out


def test_killed_hydrate_leaves_no_visible_partial_file_and_the_next_one_completes(s3_server, bucket, tmp_path):
    files, source = published(bucket, tmp_path)
    dest = tmp_path / "cache"
    proc = popen(s3_server, *hydrate_args(source, dest, "--max-bandwidth", "1MB"))  # seconds for 1.9 MB
    wait_for_partial_download(dest, proc)
    os.kill(proc.pid, signal.SIGKILL)  # the worst case: no handler runs (SIGTERM kills Python just the same)
    proc.communicate(timeout=10)

    visible = visible_files(dest)
    assert len(visible) < len(files)
    assert all(files[rel] == data for rel, data in visible.items()), "a visible file is partial or wrong"
    assert not (dest / ".slabench" / "complete.json").exists()
    assert any((dest / ".slabench" / "tmp").iterdir())  # the partial bytes exist, but only in the hidden tmp dir

    r = run(*hydrate_args(source, dest))
    assert r.returncode == 0, r.stderr
    assert visible_files(dest) == files
    assert not (dest / ".slabench" / "tmp").exists()
    assert f"{len(visible)} unchanged" in r.stdout  # what the killed run finished was kept, not fetched again


def test_a_second_hydrate_waits_for_the_first_and_downloads_nothing(s3_server, bucket, tmp_path):
    files, source = published(bucket, tmp_path)
    baseline_mark = s3_server.mark()
    assert run(*hydrate_args(source, tmp_path / "baseline", chunk="1MB")).returncode == 0
    baseline = data_gets(s3_server.requests_since(baseline_mark), bucket)

    dest = tmp_path / "cache"
    mark = s3_server.mark()
    first = popen(s3_server, *hydrate_args(source, dest, "--max-bandwidth", "2MB", chunk="1MB"))
    wait_for_partial_download(dest, first)  # the first one holds the lock now
    st = run("weights", "status", str(dest), "--offline")
    assert st.returncode == 1 and f"{dest}: hydrating: acme/tiny@v1" in st.stdout
    second = popen(s3_server, *hydrate_args(source, dest, chunk="1MB"))
    out1, err1 = first.communicate(timeout=60)
    out2, err2 = second.communicate(timeout=60)
    assert first.returncode == 0, err1
    assert second.returncode == 0, err2
    assert "fetched 5 files" in out1
    assert "another hydrate (pid" in out2 and "completed by another hydrate while we waited" in out2
    assert data_gets(s3_server.requests_since(mark), bucket) == baseline  # the same requests as one lone hydrate
    assert visible_files(dest) == files


def test_two_hydrates_started_together_download_once(s3_server, bucket, tmp_path):
    files, source = published(bucket, tmp_path)
    dest = tmp_path / "cache"
    mark = s3_server.mark()
    procs = [popen(s3_server, *hydrate_args(source, dest)) for _ in range(2)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    fetched = [out for out, _ in outs if "fetched 5 files" in out]
    assert len(fetched) == 1, outs  # exactly one process downloaded; the other waited or found it complete
    gets = data_gets(s3_server.requests_since(mark), bucket)
    per_file = {path.rsplit("/v1/", 1)[1]: n for path, n in gets.items()}
    # one download of each file: one GET per 128 KB range
    assert per_file == {rel: max(1, -(-len(data) // 128_000)) for rel, data in files.items()}
    assert visible_files(dest) == files
