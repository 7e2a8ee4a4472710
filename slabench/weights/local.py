"""The host cache's own bookkeeping, in `<dest>/.slabench/` (hidden, so vLLM and vLLM's globbing never see it).

    lock            flock(2) target: one hydrate per cache directory per node; the kernel drops it if the holder dies
    complete.json   completion marker: which manifest, from where, and each file's stat at completion
    verified.json   journal: files whose sha256 was checked, with their stat; lets a repair skip re-hashing them
    manifest.json   copy of the manifest the cache was hydrated from (for `status` without S3)
    tmp/            downloads in flight; renamed into place only after their checksum matched

A file whose (size, mtime, ctime, inode) still equals what was recorded when it was verified is trusted without
re-hashing; any write to it, a replacement or a truncation changes that tuple. Bit rot that changes none of it is
found by `--verify`, which re-hashes everything.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from slabench.weights.s3 import OperationFailed

STATE_DIR = ".slabench"
MARKER_SCHEMA = 1


def state_dir(dest: Path) -> Path:
    return dest / STATE_DIR


def tmp_dir(dest: Path) -> Path:
    return state_dir(dest) / "tmp"


def stat_record(path: Path) -> dict[str, int] | None:
    """What identifies one version of a file cheaply; None if it is missing or not a regular file."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino}


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from disk, or None when missing or unreadable (a torn state file just means 'unknown')."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Readers see the old content or the new, never a torn file, even across a crash."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    write_bytes_atomic(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())


def read_marker(dest: Path) -> dict[str, Any] | None:
    marker = read_json(state_dir(dest) / "complete.json")
    if marker is None or marker.get("schema_version") != MARKER_SCHEMA or not isinstance(marker.get("files"), dict):
        return None
    return marker


def changed_files(dest: Path, recorded: dict[str, dict[str, Any]]) -> list[str]:
    """Paths whose current stat differs from the recorded one (missing files count as changed)."""
    keys = ("size", "mtime_ns", "ctime_ns", "ino")
    out = []
    for rel, rec in recorded.items():
        now = stat_record(dest / rel)
        if now is None or any(now[k] != rec.get(k) for k in keys):
            out.append(rel)
    return sorted(out)


def complete_marker_for(dest: Path, source: str) -> dict[str, Any] | None:
    """The marker if the cache is complete for this source and no file changed since; else None. Only stats."""
    marker = read_marker(dest)
    if marker is None or marker.get("source") != source:
        return None
    return None if changed_files(dest, marker["files"]) else marker


def remove_marker(dest: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(state_dir(dest) / "complete.json")
        fsync_dir(state_dir(dest))


def write_marker(dest: Path, marker: dict[str, Any]) -> None:
    write_json_atomic(state_dir(dest) / "complete.json", {"schema_version": MARKER_SCHEMA, **marker})


def read_journal(dest: Path) -> dict[str, dict[str, Any]]:
    data = read_json(state_dir(dest) / "verified.json")
    return {k: v for k, v in (data or {}).items() if isinstance(v, dict)}


def write_journal(dest: Path, journal: dict[str, dict[str, Any]]) -> None:
    write_json_atomic(state_dir(dest) / "verified.json", journal)


def lock_holder(dest: Path) -> int | None:
    """The pid written into the lock file by whoever holds (or last held) it."""
    try:
        return int((state_dir(dest) / "lock").read_text().strip() or 0) or None
    except (OSError, ValueError):
        return None


def is_locked(dest: Path) -> bool:
    """True while some process holds the cache lock (a hydrate is running)."""
    path = state_dir(dest) / "lock"
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@contextlib.contextmanager
def cache_lock(
    dest: Path, timeout_s: float | None = None, on_wait: Callable[[str], None] | None = None
) -> Iterator[bool]:
    """Hold the cache's exclusive lock; yields True if another process held it first (we waited for it)."""
    state_dir(dest).mkdir(parents=True, exist_ok=True)
    fd = os.open(state_dir(dest) / "lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        waited = False
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if not waited and on_wait is not None:
                holder = lock_holder(dest)
                on_wait(f"another hydrate (pid {holder or '?'}) is filling {dest}; waiting for it")
            waited = True
            if deadline is not None and time.monotonic() >= deadline:
                raise OperationFailed(
                    f"{dest}: still locked by pid {lock_holder(dest) or '?'} after {timeout_s:g} s — "
                    "wait for that hydrate or raise --lock-timeout"
                )
            time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield waited
    finally:
        os.close(fd)  # closing the descriptor releases the flock
