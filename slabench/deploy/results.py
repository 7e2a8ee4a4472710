"""Fetch a run's results (records, report, exit code) from S3 to a local directory."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from slabench.core.errors import UserError
from slabench.weights.s3 import S3Url, make_client, s3_errors


def local_path(dest: Path, prefix: str, key: str) -> Path:
    """Where an object under `prefix` lands in `dest`; keys that would escape `dest` are refused."""
    rel = PurePosixPath(key[len(prefix) :].lstrip("/")) if prefix else PurePosixPath(key)
    if not rel.parts or any(p in ("..", ".") for p in rel.parts):
        raise UserError(f"s3 key {key!r} is not a plain relative path under {prefix!r}; refusing to write it")
    return dest.joinpath(*rel.parts)


def fetch_results(url: S3Url, dest: Path, endpoint_url: str | None = None, region: str | None = None) -> list[Path]:
    """Download every object under `url` into `dest` (relative paths kept). Returns the files written."""
    client = make_client(endpoint_url=endpoint_url, region=region)
    prefix = f"{url.prefix}/" if url.prefix else ""
    written = []
    with s3_errors(url):
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=url.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                target = local_path(dest, prefix, obj["Key"])
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(target.name + ".part")
                client.download_file(url.bucket, obj["Key"], str(tmp))
                tmp.replace(target)
                written.append(target)
    return written
