"""S3 → host cache. Complete and verified on success; never a visible partial or unverified file on failure.

Order of work, and why:
1. Fast path: the completion marker matches the source and every file's stat is unchanged → done, with no S3
   request and no boto3 import (pod restarts, node reboots).
2. GET the manifest before touching the disk, so a wrong bucket or URL leaves nothing behind.
3. Take the cache's flock; a second pod on the node waits here, then usually finds the marker and stops.
4. Drop the marker, then sort files: trusted (journal stat unchanged), to re-hash (right size, unknown), to fetch.
5. Check the free space, download into `.slabench/tmp/`, hash each finished file against the manifest, fsync,
   rename into place, journal it. A kill at any point leaves only hidden temp files, removed by the next run.
6. Write the marker last.
"""

from __future__ import annotations

import datetime as dt
import errno
import os
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slabench.core.errors import UserError
from slabench.weights import local
from slabench.weights.manifest import MANIFEST_NAME, FileEntry, Manifest, digest, hash_file, parse_manifest
from slabench.weights.progress import Progress
from slabench.weights.s3 import (
    OperationFailed,
    S3Url,
    describe_error,
    get_bytes,
    human_bytes,
    is_not_found,
    make_client,
)
from slabench.weights.transfer import DEFAULT_SETTINGS, TransferSettings, subscriber, transfer_manager

_STAT_KEYS = ("size", "mtime_ns", "ctime_ns", "ino")
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


@dataclass
class HydrateResult:
    dest: Path
    source: str
    noop: bool = False
    waited: bool = False  # another process held the lock first
    fetched: list[str] = field(default_factory=list)
    fetched_bytes: int = 0
    rehashed: int = 0  # local files checked by hash (unknown or changed since last verified)
    trusted: int = 0  # local files trusted by their unchanged stat
    extra: list[str] = field(default_factory=list)  # files in dest the manifest does not list
    seconds: float = 0.0

    @property
    def mb_per_s(self) -> float | None:
        return self.fetched_bytes / 1e6 / self.seconds if self.fetched_bytes and self.seconds > 0 else None


def hydrate(
    source: S3Url,
    dest: Path,
    *,
    settings: TransferSettings = DEFAULT_SETTINGS,
    endpoint_url: str | None = None,
    region: str | None = None,
    verify: bool = False,
    refresh: bool = False,
    lock_timeout_s: float | None = None,
    keep_free: int = 0,
    progress: str = "auto",
    say: Callable[[str], None] = print,
) -> HydrateResult:
    start = time.monotonic()
    src = str(source)
    if not (verify or refresh) and local.complete_marker_for(dest, src):
        return HydrateResult(dest, src, noop=True, seconds=time.monotonic() - start)
    if dest.exists() and not dest.is_dir():
        raise UserError(f"--dest: {dest}: exists and is not a directory — pick a directory path")

    client = make_client(endpoint_url, region, max_pool=settings.concurrency + 4)
    manifest_url = source.child(MANIFEST_NAME)
    if progress != "none":
        say(f"hydrate: reading the manifest {manifest_url} from S3{f' at {endpoint_url}' if endpoint_url else ''}")
    raw = get_bytes(client, manifest_url)
    if raw is None:
        raise UserError(
            f"{manifest_url}: no manifest — nothing is published at {source}; check MODEL/REVISION in --source "
            "or run `slabench weights publish` first"
        )
    manifest = parse_manifest(raw, str(manifest_url))
    manifest_sha = digest(raw)

    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        msg = f"--dest: {dest}: cannot create it ({e.strerror}) — check the path and the volume mount"
        raise UserError(msg) from None
    try:
        with local.cache_lock(dest, lock_timeout_s, on_wait=say) as waited:
            marker = None if verify else local.complete_marker_for(dest, src)
            if marker is not None and marker.get("manifest_sha256") == manifest_sha:
                return HydrateResult(dest, src, noop=True, waited=waited, seconds=time.monotonic() - start)
            result = HydrateResult(dest, src, waited=waited)
            _fill(client, source, dest, manifest, raw, manifest_sha, settings, verify, keep_free, progress, say, result)
    except OSError as exc:  # disk full, read-only mount, permissions: one line, not a traceback
        raise _explain(exc, source, dest, "") from None
    result.seconds = time.monotonic() - start
    return result


def _fill(
    client: Any,
    source: S3Url,
    dest: Path,
    manifest: Manifest,
    raw: bytes,
    manifest_sha: str,
    settings: TransferSettings,
    verify: bool,
    keep_free: int,
    progress: str,
    say: Callable[[str], None],
    result: HydrateResult,
) -> None:
    """Bring dest to exactly the manifest's content; called with the cache lock held."""
    local.remove_marker(dest)
    shutil.rmtree(local.tmp_dir(dest), ignore_errors=True)  # leftovers of a killed run
    local.write_bytes_atomic(local.state_dir(dest) / "manifest.json", raw)
    origin = {"source": str(source), "manifest_sha256": manifest_sha}
    local.write_json_atomic(local.state_dir(dest) / "origin.json", origin)

    journal = Journal(dest, {} if verify else local.read_journal(dest), manifest)
    to_fetch = _check_local(dest, manifest, journal, result)
    need = sum(e.size for e in to_fetch)
    free = shutil.disk_usage(dest).free
    if need + keep_free > free:
        raise OperationFailed(
            f"{dest}: not enough disk space — need {human_bytes(need)} more"
            + (f" plus {human_bytes(keep_free)} kept free" if keep_free else "")
            + f", {human_bytes(free)} free; free space or use a larger volume"
        )
    say(
        f"hydrate: {manifest.model}@{manifest.revision} {source} → {dest}: "
        f"fetching {len(to_fetch)} of {len(manifest.files)} files ({human_bytes(need)})"
    )
    if to_fetch:
        _download(client, source, dest, to_fetch, settings, journal, progress, result)

    stats = {e.path: local.stat_record(dest / e.path) for e in manifest.files}
    missing = [p for p, st in stats.items() if st is None]
    if missing:  # someone deleted a file under our feet; do not claim completeness
        raise OperationFailed(f"{dest}: {missing[0]} vanished while hydrating — run hydrate again")
    local.write_marker(
        dest,
        {
            "source": str(source),
            "manifest_sha256": manifest_sha,
            "model": manifest.model,
            "revision": manifest.revision,
            "commit": manifest.commit,
            "total_bytes": manifest.total_bytes,
            "completed_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "files": stats,
        },
    )
    result.extra = _extra_files(dest, manifest)


class Journal:
    """verified.json, updated as files are verified; thread-safe because installs finish on several threads."""

    def __init__(self, dest: Path, records: dict[str, dict[str, Any]], manifest: Manifest):
        self.dest = dest
        wanted = manifest.by_path()
        # Only keep records that still describe a file of this manifest with the same checksum.
        self.records = {p: r for p, r in records.items() if p in wanted and r.get("sha256") == wanted[p].sha256}
        self._lock = threading.Lock()

    def trusts(self, entry: FileEntry) -> bool:
        rec = self.records.get(entry.path)
        now = local.stat_record(self.dest / entry.path)
        return rec is not None and now is not None and all(now[k] == rec.get(k) for k in _STAT_KEYS)

    def record(self, entry: FileEntry) -> None:
        st = local.stat_record(self.dest / entry.path)
        with self._lock:
            if st is None:
                self.records.pop(entry.path, None)
            else:
                self.records[entry.path] = {**st, "sha256": entry.sha256}
            local.write_journal(self.dest, self.records)

    def forget(self, entries: list[FileEntry]) -> None:
        with self._lock:
            for e in entries:
                self.records.pop(e.path, None)
            local.write_journal(self.dest, self.records)


def _check_local(dest: Path, manifest: Manifest, journal: Journal, result: HydrateResult) -> list[FileEntry]:
    """Which manifest files must be fetched. Files of the right size but unknown state are hashed (in parallel)."""
    to_hash: list[FileEntry] = []
    to_fetch: list[FileEntry] = []
    for e in manifest.files:
        if journal.trusts(e):
            result.trusted += 1
            continue
        st = local.stat_record(dest / e.path)
        (to_hash if st is not None and st["size"] == e.size else to_fetch).append(e)
    journal.forget(to_fetch + to_hash)

    def matches(e: FileEntry) -> bool:
        try:
            return hash_file(dest / e.path) == (e.size, e.sha256)
        except OSError:
            return False

    with ThreadPoolExecutor(max_workers=4) as pool:
        for e, ok in zip(to_hash, pool.map(matches, to_hash), strict=True):
            result.rehashed += 1
            if ok:
                journal.record(e)
            else:
                to_fetch.append(e)
    return to_fetch


def _download(
    client: Any,
    source: S3Url,
    dest: Path,
    entries: list[FileEntry],
    settings: TransferSettings,
    journal: Journal,
    progress_mode: str,
    result: HydrateResult,
) -> None:
    bar = Progress(sum(e.size for e in entries), "hydrate", mode=progress_mode)
    local.tmp_dir(dest).mkdir(parents=True, exist_ok=True)
    current = ""  # the file being waited on, for error messages
    try:
        # The manager as a context manager: on an exception its __exit__ cancels what is in flight
        # (s3transfer 0.17's shutdown(cancel=True) passes its arguments wrongly and raises TypeError).
        with transfer_manager(client, settings) as manager, ThreadPoolExecutor(max_workers=2) as installers:
            futures = []
            for i, e in enumerate(entries):
                tmp = local.tmp_dir(dest) / f"{i:05d}.part"
                fut = manager.download(
                    source.bucket, source.key(e.path), str(tmp), subscribers=[subscriber(bar.advance)]
                )
                futures.append((e, tmp, fut))
            installs = []
            for e, tmp, fut in futures:
                current = e.path
                fut.result()
                installs.append((e, installers.submit(_install, source, dest, e, tmp, journal)))
            for e, inst in installs:
                current = e.path
                inst.result()
                result.fetched.append(e.path)
                result.fetched_bytes += e.size
    except BaseException as exc:
        raise _explain(exc, source, dest, current) from None
    finally:
        bar.close()
        shutil.rmtree(local.tmp_dir(dest), ignore_errors=True)


def _install(source: S3Url, dest: Path, entry: FileEntry, tmp: Path, journal: Journal) -> None:
    """Verify a downloaded temp file against the manifest, make it durable, and rename it into place."""
    size, sha = hash_file(tmp)
    if (size, sha) != (entry.size, entry.sha256):
        tmp.unlink(missing_ok=True)
        raise OperationFailed(
            f"{source.child(entry.path)}: checksum mismatch — S3 holds {human_bytes(size)} with sha256 {sha[:12]}…, "
            f"the manifest says {human_bytes(entry.size)} with {entry.sha256[:12]}…; the S3 copy is corrupt or was "
            "overwritten: re-publish it (slabench weights publish --force)"
        )
    os.chmod(tmp, 0o644)  # vLLM may run as another non-root uid
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    final = dest / entry.path
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, final)
    local.fsync_dir(final.parent)
    journal.record(entry)


def _explain(exc: BaseException, source: S3Url, dest: Path, path: str) -> BaseException:
    """Turn a transfer failure into one line; KeyboardInterrupt and our own errors pass through."""
    if isinstance(exc, UserError | KeyboardInterrupt | SystemExit):
        return exc
    url = source.child(path) if path else source
    if is_not_found(exc):
        return OperationFailed(f"{url}: listed in the manifest but missing in S3 — re-publish this revision")
    what = f" writing {path}" if path else ""
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        return OperationFailed(
            f"{dest}: no space{what}: {exc.strerror} (volume full or a size limit hit); no partial file was kept — "
            "free space or use a larger volume"
        )
    mapped = describe_error(exc, url)
    if mapped is not None:
        return mapped
    if isinstance(exc, OSError):
        return OperationFailed(f"{dest}: cannot write{what}: {exc.strerror or exc} — check the volume and permissions")
    return exc


def _extra_files(dest: Path, manifest: Manifest) -> list[str]:
    wanted = manifest.by_path()
    out = []
    for dirpath, dirnames, filenames in os.walk(dest):
        if Path(dirpath) == dest:
            dirnames[:] = [d for d in dirnames if d != local.STATE_DIR]
        for name in filenames:
            rel = (Path(dirpath) / name).relative_to(dest).as_posix()
            if rel not in wanted:
                out.append(rel)
    return sorted(out)
