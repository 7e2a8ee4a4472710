"""The manifest of one published revision: every file's path, size and sha256, plus the revision and the time.

It is written to S3 last (`<root>/.slabench-manifest.json`), so its presence means the publish is complete, and
its sha256 identifies exactly what a host cache holds. Readers ignore unknown fields (outputs only gain fields);
a bigger `schema_version` means a breaking change and is refused.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from slabench.core.errors import UserError

MANIFEST_NAME = ".slabench-manifest.json"
SCHEMA_VERSION = 1
# Local state lives in `<dest>/.slabench/`; no model file may use that name or the manifest's.
RESERVED = (".slabench", MANIFEST_NAME)

_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")


def check_model_name(name: str) -> str:
    """`org/name` (any number of segments) made of letters, digits, '.', '_', '-'."""
    parts = name.split("/")
    if not name or not all(_SEGMENT.match(p) and ".." not in p for p in parts):
        raise UserError(
            f"--model: {name!r} is not a valid model name — use segments of letters, digits, '.', '_', '-' "
            "separated by '/', e.g. meta-llama/Llama-3.1-8B-Instruct"
        )
    return name


def check_revision(rev: str) -> str:
    """One path segment: a commit sha, a tag or a branch name like `main`."""
    if not _SEGMENT.match(rev) or ".." in rev:
        raise UserError(
            f"--revision: {rev!r} is not a valid revision — one segment of letters, digits, '.', '_', '-' "
            "(a commit sha or a name like main)"
        )
    return rev


def check_relpath(path: str) -> str:
    """A manifest path must stay inside the cache directory: relative, '/'-separated, no '.'/'..' segments."""
    parts = path.split("/")
    if (
        not path
        or path.startswith("/")
        or "\\" in path
        or "\0" in path
        or any(p in ("", ".", "..") for p in parts)
        or parts[0] in RESERVED
    ):
        raise ValueError(f"unsafe or reserved file path {path!r}")
    return path


class FileEntry(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    path: str
    size: int = Field(ge=0)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")

    @field_validator("path")
    @classmethod
    def _safe_path(cls, v: str) -> str:
        return check_relpath(v)


class Manifest(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    schema_version: int
    model: str
    revision: str
    commit: str | None = None  # the Hugging Face commit sha the revision resolved to, when known
    created: str  # ISO 8601, UTC
    total_bytes: int = Field(ge=0)
    files: tuple[FileEntry, ...]

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(
                f"schema_version {self.schema_version} is not supported (this slabench reads {SCHEMA_VERSION}); "
                "upgrade slabench"
            )
        paths = [f.path for f in self.files]
        if len(set(paths)) != len(paths):
            raise ValueError("a file path is listed twice")
        as_dirs = {"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 1)}
        clash = as_dirs.intersection(paths)
        if clash:
            raise ValueError(f"{sorted(clash)[0]!r} is both a file and a directory")
        if sum(f.size for f in self.files) != self.total_bytes:
            raise ValueError("total_bytes does not equal the sum of the file sizes")
        return self

    def by_path(self) -> dict[str, FileEntry]:
        return {f.path: f for f in self.files}

    def to_json_bytes(self) -> bytes:
        return (json.dumps(self.model_dump(), indent=2, sort_keys=True) + "\n").encode()

    def same_content(self, other: Manifest) -> bool:
        """Same files with the same bytes (the `created` time and the revision's name do not matter)."""
        return self.by_path() == other.by_path()


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse_manifest(data: bytes, where: str) -> Manifest:
    """Bytes from S3 or disk → Manifest; anything malformed is one line naming where and what."""
    from slabench.weights.s3 import OperationFailed

    try:
        return Manifest.model_validate(json.loads(data))
    except json.JSONDecodeError as e:
        raise OperationFailed(f"{where}: the manifest is not valid JSON ({e.msg} at line {e.lineno})") from None
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise OperationFailed(
            f"{where}: invalid manifest: {field}: {first['msg']} — re-publish it with `slabench weights publish`"
        ) from None


def hash_file(path: Path) -> tuple[int, str]:
    """(size, sha256 hex) of a file; hashlib releases the GIL, so threads hash files in parallel."""
    with open(path, "rb") as f:
        h = hashlib.file_digest(f, "sha256")
        return f.tell(), h.hexdigest()


def diff(old: Manifest, new: Manifest) -> list[str]:
    """Paths that were added, removed or changed between two manifests, sorted."""
    a, b = old.by_path(), new.by_path()
    return sorted(p for p in a.keys() | b.keys() if a.get(p) != b.get(p))


def build_manifest(
    files: Iterable[tuple[str, Path]],
    model: str,
    revision: str,
    commit: str | None = None,
    workers: int = 4,
    now: dt.datetime | None = None,
) -> Manifest:
    """Hash every (relative path, local file) pair and describe them as one revision."""
    items = sorted(files)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        hashed = list(pool.map(lambda item: hash_file(item[1]), items))
    entries = tuple(
        FileEntry(path=rel, size=size, sha256=sha) for (rel, _), (size, sha) in zip(items, hashed, strict=True)
    )
    created = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Manifest(
        schema_version=SCHEMA_VERSION,
        model=model,
        revision=revision,
        commit=commit,
        created=created,
        total_bytes=sum(e.size for e in entries),
        files=entries,
    )
