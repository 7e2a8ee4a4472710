"""What is cached where, and whether it matches S3. Pure inspection: never changes a cache or S3.

A cache is any directory with a `.slabench/` state directory (written by `hydrate`). Its state is one of:
  complete    marker present, every file's stat unchanged since it was verified
  changed     marker present, but some file was modified, replaced or removed since (hydrate repairs it)
  hydrating   no marker, and a hydrate holds the lock right now
  incomplete  no marker and no hydrate running (one was interrupted, or failed: hydrate again)
Against S3 (unless offline): `matches` (same manifest bytes), `differs` (re-published: hydrate --refresh),
`missing` (no manifest any more), or the error.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from slabench.core.errors import UserError
from slabench.weights import local
from slabench.weights.manifest import MANIFEST_NAME, FileEntry, Manifest, digest, hash_file, parse_manifest
from slabench.weights.s3 import S3Url, get_bytes, parse_s3_url, s3_errors


@dataclass
class CacheStatus:
    path: str
    state: str  # complete | changed | hydrating | incomplete
    model: str | None = None
    revision: str | None = None
    source: str | None = None
    files: int = 0
    total_bytes: int = 0
    changed: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)  # only with verify: sha256 differs from the manifest
    s3: str | None = None  # matches | differs | missing | error: ... ; None when offline

    @property
    def ok(self) -> bool:
        return self.state == "complete" and not self.corrupt and self.s3 in (None, "matches")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def find_caches(root: Path, max_depth: int = 6) -> list[Path]:
    """`root` itself if it is a cache, else every cache below it (model names nest: org/name/revision)."""
    if (root / local.STATE_DIR).is_dir():
        return [root]
    found = []
    base_depth = len(root.parts)
    for dirpath, dirnames, _ in os.walk(root):
        here = Path(dirpath)
        if local.STATE_DIR in dirnames:
            found.append(here)
            dirnames[:] = []  # a cache does not contain other caches
        elif len(here.parts) - base_depth >= max_depth:
            dirnames[:] = []
        else:
            dirnames.sort()
    return sorted(found)


def local_status(dest: Path, verify: bool = False) -> CacheStatus:
    marker = local.read_marker(dest)
    origin = local.read_json(local.state_dir(dest) / "origin.json") or {}
    manifest = _local_manifest(dest)
    status = CacheStatus(path=str(dest), state="incomplete", source=(marker or origin).get("source"))
    if manifest is not None:
        status.model, status.revision = manifest.model, manifest.revision
        status.files, status.total_bytes = len(manifest.files), manifest.total_bytes
    if marker is not None:
        status.changed = local.changed_files(dest, marker["files"])
        status.state = "changed" if status.changed else "complete"
    elif local.is_locked(dest):
        status.state = "hydrating"
    if verify and manifest is not None:

        def bad(entry: FileEntry) -> bool:
            try:
                return hash_file(dest / entry.path) != (entry.size, entry.sha256)
            except OSError:
                return True

        with ThreadPoolExecutor(max_workers=4) as pool:
            status.corrupt = [e.path for e, b in zip(manifest.files, pool.map(bad, manifest.files), strict=True) if b]
    return status


def compare_with_s3(status: CacheStatus, dest: Path, client: Any) -> None:
    """Fill `status.s3`: does the manifest this cache was built from still equal the one in S3?"""
    origin = local.read_json(local.state_dir(dest) / "origin.json") or {}
    marker = local.read_marker(dest) or {}
    recorded = marker.get("manifest_sha256") or origin.get("manifest_sha256")
    if not status.source or not recorded:
        status.s3 = "unknown: no source recorded"
        return
    try:
        url = parse_s3_url(status.source).child(MANIFEST_NAME)
        raw = get_bytes(client, url)
    except UserError as e:
        status.s3 = f"error: {e}"
        return
    status.s3 = "missing" if raw is None else ("matches" if digest(raw) == recorded else "differs")


def list_published(client: Any, url: S3Url) -> list[dict[str, Any]]:
    """Every published revision under an s3:// prefix: model, revision, commit, files, bytes, created."""
    out = []
    prefix = url.prefix + "/" if url.prefix else ""
    with s3_errors(url):
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=url.bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                if not obj["Key"].endswith("/" + MANIFEST_NAME):
                    continue
                key_url = S3Url(url.bucket, obj["Key"])
                raw = get_bytes(client, key_url)
                if raw is None:
                    continue
                m = parse_manifest(raw, str(key_url))
                root = S3Url(url.bucket, obj["Key"][: -len(MANIFEST_NAME) - 1])
                out.append(
                    {
                        "source": str(root),
                        "model": m.model,
                        "revision": m.revision,
                        "commit": m.commit,
                        "files": len(m.files),
                        "total_bytes": m.total_bytes,
                        "created": m.created,
                    }
                )
    return out


def _local_manifest(dest: Path) -> Manifest | None:
    """The manifest copy hydrate keeps in the cache; None if absent or damaged (status reports, never fails)."""
    path = local.state_dir(dest) / "manifest.json"
    try:
        return parse_manifest(path.read_bytes(), str(path))
    except (OSError, UserError):
        return None
