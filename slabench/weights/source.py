"""Local snapshot layouts `publish` reads: a plain model directory or the Hugging Face cache.

Hugging Face cache (`~/.cache/huggingface/hub`):
    models--ORG--NAME/refs/main              → text file holding the commit sha
    models--ORG--NAME/snapshots/<sha>/...    → the files, as symlinks into ../../blobs/
`--from` may point at the hub directory, at `models--ORG--NAME`, or at one snapshot directory.
"""

from __future__ import annotations

import os
from pathlib import Path

from slabench.core.errors import UserError
from slabench.weights.manifest import MANIFEST_NAME, RESERVED, check_relpath

# Bookkeeping directories that are never part of a model (git metadata, huggingface_hub's local_dir cache).
SKIP_DIRS = frozenset({".git", ".cache", ".huggingface", *RESERVED})


def _repo_dir_name(model: str) -> str:
    return "models--" + model.replace("/", "--")


def resolve_snapshot(path: Path, model: str, revision: str) -> tuple[Path, str | None]:
    """The directory holding the files, and the Hugging Face commit sha when the layout tells it."""
    if not path.is_dir():
        raise UserError(f"--from: {path}: no such directory — point it at a model directory or a HF cache snapshot")
    if (path / _repo_dir_name(model)).is_dir():  # the hub root
        path = path / _repo_dir_name(model)
    if (path / "snapshots").is_dir():  # models--ORG--NAME
        ref = path / "refs" / revision
        commit = ref.read_text().strip() if ref.is_file() else revision
        snapshot = path / "snapshots" / commit
        if not snapshot.is_dir():
            refs = sorted(p.name for p in (path / "refs").glob("*")) if (path / "refs").is_dir() else []
            snaps = sorted(p.name for p in (path / "snapshots").iterdir())
            raise UserError(
                f"--revision: {revision!r} is neither a ref ({', '.join(refs) or 'none'}) nor a snapshot "
                f"({', '.join(snaps) or 'none'}) in {path} — pass one of those"
            )
        return snapshot, commit
    if path.parent.name == "snapshots" and (path.parent.parent / "blobs").is_dir():  # one snapshot
        return path, path.name
    return path, None


def list_files(root: Path) -> list[tuple[str, Path]]:
    """Every model file under root as (relative '/' path, path), symlinks followed; bookkeeping dirs skipped."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if rel == MANIFEST_NAME:
                continue
            if not full.exists():
                raise UserError(f"--from: {full}: broken symlink — the snapshot is incomplete; download it again")
            if not full.is_file():
                raise UserError(f"--from: {full}: not a regular file — remove it or publish from a clean copy")
            try:
                check_relpath(rel)
            except ValueError as e:
                raise UserError(f"--from: {full}: {e} — rename the file") from None
            out.append((rel, full))
    if not out:
        raise UserError(f"--from: {root}: no files to publish — point it at the model directory")
    return out


def fetch_from_hugging_face(repo_id: str, revision: str, cache_dir: Path | None) -> Path:
    """Optional first step: download a snapshot with huggingface_hub (only if installed); return its directory."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise UserError(
            "--hf-repo: huggingface_hub is not installed — `pip install huggingface_hub`, or download the "
            "snapshot another way and pass --from DIR"
        ) from None
    from slabench.weights.s3 import OperationFailed

    try:  # HF_TOKEN (for gated models) is read by huggingface_hub from the environment, never passed or printed
        return Path(snapshot_download(repo_id=repo_id, revision=revision, cache_dir=cache_dir))
    except Exception as e:
        raise OperationFailed(f"--hf-repo: {repo_id}@{revision}: download failed: {type(e).__name__}: {e}") from None
