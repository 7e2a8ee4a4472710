"""publish → hydrate → no-op → repair, against a real S3 API (moto server on 127.0.0.1), the CLI as real processes.

S3 requests are counted where they arrive: in the moto server's own request log.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from urllib.parse import unquote

from slabench.weights.hydrate import hydrate
from slabench.weights.s3 import parse_s3_url
from tests.helpers import weights_helpers
from tests.helpers.weights_helpers import cli, run, s3_client, visible_files, write_model

s3_server, bucket = weights_helpers.s3_server, weights_helpers.bucket  # fixtures

CHUNK = "256KB"  # small ranged GETs, so the 1.2 MB shard arrives in several parallel parts


def publish(bucket, snap: Path, *extra: str):
    r = run(
        *("weights", "publish", "--from", str(snap), "--to", f"s3://{bucket}/models"),
        *("--model", "acme/tiny", "--revision", "v1", "--progress", "none", *extra),
    )
    assert r.returncode == 0, r.stderr
    return f"s3://{bucket}/models/acme/tiny/v1"


def run_hydrate(s3_server, source: str, dest: Path, *extra: str, process: bool = False):
    """The hydrate command; as its own process (like the init container) when `process`, else in this one."""
    args = (
        *("weights", "hydrate", "--source", source, "--dest", str(dest), "--chunk-size", CHUNK, "--progress", "log"),
        *extra,
    )
    return cli(s3_server, *args) if process else run(*args)


def fetched_files(requests, prefix: str) -> dict[str, int]:
    """GETs per file below the revision prefix (ranged GETs of one file count separately), manifest excluded."""
    out: dict[str, int] = {}
    for r in requests:
        path = unquote(r.path)
        if r.method == "GET" and path.startswith(prefix) and not path.endswith(".slabench-manifest.json"):
            rel = path[len(prefix) :]
            out[rel] = out.get(rel, 0) + 1
    return out


def test_publish_hydrate_noop_repair(s3_server, bucket, tmp_path):
    files = write_model(tmp_path / "snap")
    source = publish(bucket, tmp_path / "snap")
    prefix = f"/{bucket}/models/acme/tiny/v1/"
    dest = tmp_path / "nvme" / "models" / "acme" / "tiny" / "v1"

    # 1. cold: every file fetched once (the big shard in several ranged GETs), verified, in place
    mark = s3_server.mark()
    r = run_hydrate(s3_server, source, dest, process=True)
    assert r.returncode == 0, r.stderr
    assert "complete in" in r.stdout and "fetched 5 files" in r.stdout
    assert visible_files(dest) == files
    gets = fetched_files(s3_server.requests_since(mark), prefix)
    assert set(gets) == set(files)
    assert gets["model-00001-of-00002.safetensors"] == 5  # 1.2 MB / 256 KB parts
    assert (dest / ".slabench" / "complete.json").is_file()
    assert not (dest / ".slabench" / "tmp").exists()

    # 2. warm: a no-op with zero S3 requests of any kind
    mark = s3_server.mark()
    started = time.perf_counter()
    r = run_hydrate(s3_server, source, dest, process=True)
    elapsed = time.perf_counter() - started
    assert r.returncode == 0, r.stderr
    assert "already complete" in r.stdout and "nothing fetched" in r.stdout
    assert s3_server.requests_since(mark) == []
    print(f"\nno-op hydrate, whole process (python start + imports + stat): {elapsed * 1000:.0f} ms")

    # 3. one file corrupted in place (same size): only that file comes back from S3, the others stay untouched
    shard1_inode = (dest / "model-00001-of-00002.safetensors").stat().st_ino
    with open(dest / "model-00002-of-00002.safetensors", "r+b") as f:
        f.seek(4096)
        f.write(b"\0" * 64)
    st = run("weights", "status", str(dest))
    assert st.returncode == 1 and "changed" in st.stdout and "model-00002-of-00002.safetensors" in st.stdout
    mark = s3_server.mark()
    r = run_hydrate(s3_server, source, dest)
    assert r.returncode == 0, r.stderr
    assert "fetched 1 files" in r.stdout and "4 unchanged, 1 re-hashed" in r.stdout
    assert fetched_files(s3_server.requests_since(mark), prefix) == {"model-00002-of-00002.safetensors": 3}
    assert visible_files(dest) == files
    assert (dest / "model-00001-of-00002.safetensors").stat().st_ino == shard1_inode

    # 4. a deleted file and a truncated one: both re-fetched
    (dest / "config.json").unlink()
    with open(dest / "tokenizer.json", "r+b") as f:
        f.truncate(100)
    mark = s3_server.mark()
    r = run_hydrate(s3_server, source, dest)
    assert r.returncode == 0, r.stderr
    assert set(fetched_files(s3_server.requests_since(mark), prefix)) == {"config.json", "tokenizer.json"}
    assert visible_files(dest) == files

    # 5. status agrees, in both forms
    st = run("weights", "status", str(tmp_path / "nvme"), "--source", f"s3://{bucket}/models")
    assert st.returncode == 0, st.stdout + st.stderr
    assert f"{dest}: complete: acme/tiny@v1, 5 files" in st.stdout and "S3: matches" in st.stdout
    assert f"{source}: acme/tiny@v1 commit=- 5 files" in st.stdout
    doc = json.loads(run("weights", "status", str(dest), "--json", "--verify").stdout)
    assert doc["caches"][0]["ok"] is True and doc["caches"][0]["corrupt"] == []
    assert doc["caches"][0]["total_bytes"] == sum(len(b) for b in files.values())


def test_verify_rehashes_everything_and_refresh_follows_a_forced_republish(bucket, tmp_path):
    files = write_model(tmp_path / "snap")
    source = publish(bucket, tmp_path / "snap")
    dest = tmp_path / "cache"
    url = parse_s3_url(source)
    first = hydrate(url, dest, progress="none", say=lambda _: None)
    assert len(first.fetched) == 5 and first.mb_per_s is not None

    again = hydrate(url, dest, verify=True, progress="none", say=lambda _: None)
    assert (again.rehashed, again.trusted, again.fetched) == (5, 0, [])

    # Same revision re-published with one file changed (an operator's --force): hosts keep what they have until
    # asked to look at S3 again, because revisions are meant to be immutable.
    (tmp_path / "snap" / "config.json").write_bytes(b'{"patched": true}')
    publish(bucket, tmp_path / "snap", "--force")
    assert hydrate(url, dest, progress="none", say=lambda _: None).noop
    st = run("weights", "status", str(dest))
    assert st.returncode == 1 and "S3: differs" in st.stdout
    refreshed = hydrate(url, dest, refresh=True, progress="none", say=lambda _: None)
    assert refreshed.fetched == ["config.json"] and refreshed.trusted == 4
    assert visible_files(dest) == {**files, "config.json": b'{"patched": true}'}


def test_extra_local_files_are_reported_not_deleted(s3_server, bucket, tmp_path):
    write_model(tmp_path / "snap")
    source = publish(bucket, tmp_path / "snap")
    dest = tmp_path / "cache"
    dest.mkdir()
    (dest / "stray.safetensors").write_bytes(b"old shard")
    r = run_hydrate(s3_server, source, dest)
    assert r.returncode == 0, r.stderr
    assert "1 files in" in r.stdout and "stray.safetensors" in r.stdout and "remove them" in r.stdout
    assert (dest / "stray.safetensors").read_bytes() == b"old shard"


def test_manifest_in_s3_describes_every_object(s3_server, bucket, tmp_path):
    files = write_model(tmp_path / "snap")
    publish(bucket, tmp_path / "snap")
    client = s3_client()
    raw = client.get_object(Bucket=bucket, Key="models/acme/tiny/v1/.slabench-manifest.json")["Body"].read()
    manifest = json.loads(raw)
    assert manifest["model"] == "acme/tiny" and manifest["revision"] == "v1" and manifest["created"].endswith("Z")
    listed = {f["path"]: f for f in manifest["files"]}
    assert set(listed) == set(files)
    for rel, data in files.items():
        head = client.head_object(Bucket=bucket, Key=f"models/acme/tiny/v1/{rel}")
        assert head["ContentLength"] == len(data) == listed[rel]["size"]
        assert head["Metadata"]["sha256"] == listed[rel]["sha256"]
