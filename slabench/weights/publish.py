"""Local snapshot → `s3://bucket/prefix/<model>/<revision>/` plus its manifest, once per revision.

- Parallel multipart uploads through one TransferManager (boto3 also sends a CRC32 per request by default, so S3
  rejects bytes damaged in flight).
- Resumable per file: each object carries its sha256 as metadata; a re-run HEADs every key and skips objects that
  already match, so an interrupted publish continues where it stopped.
- The manifest goes last: until it exists, hydrates refuse the prefix ("no manifest"), never see half a model.
- A revision is immutable for the hosts that cached it: publishing different content to an existing revision is
  refused unless `--force` (which removes the old manifest first, uploads, then deletes objects no longer listed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slabench.core.errors import UserError
from slabench.weights import local
from slabench.weights.manifest import (
    MANIFEST_NAME,
    FileEntry,
    Manifest,
    build_manifest,
    check_model_name,
    check_revision,
    diff,
    parse_manifest,
)
from slabench.weights.progress import Progress
from slabench.weights.s3 import (
    OperationFailed,
    S3Url,
    describe_error,
    get_bytes,
    human_bytes,
    make_client,
    s3_errors,
)
from slabench.weights.source import list_files, resolve_snapshot
from slabench.weights.transfer import DEFAULT_SETTINGS, TransferSettings, subscriber, transfer_manager


@dataclass
class PublishResult:
    root: S3Url
    manifest: Manifest
    uploaded: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already in S3 with the same sha256
    uploaded_bytes: int = 0
    deleted: list[str] = field(default_factory=list)  # stale objects removed after a --force
    already_published: bool = False
    seconds: float = 0.0


def publish(
    src: Path,
    to: S3Url,
    model: str,
    revision: str,
    *,
    force: bool = False,
    settings: TransferSettings = DEFAULT_SETTINGS,
    endpoint_url: str | None = None,
    region: str | None = None,
    progress: str = "auto",
    say: Callable[[str], None] = print,
) -> PublishResult:
    start = time.monotonic()
    check_model_name(model)
    check_revision(revision)
    snapshot, commit = resolve_snapshot(src, model, revision)
    files = list_files(snapshot)
    say(f"publish: hashing {len(files)} files in {snapshot}")
    stats_before = {rel: local.stat_record(path) for rel, path in files}
    manifest = build_manifest(files, model, revision, commit)

    root = to.child(model, revision)
    manifest_url = root.child(MANIFEST_NAME)
    client = make_client(endpoint_url, region, max_pool=settings.concurrency + 4)
    result = PublishResult(root, manifest)
    old = _existing_manifest(client, root, manifest, force)
    if old is not None and old.same_content(manifest) and old.commit == manifest.commit:
        result.already_published = True
        say(f"publish: {root} already holds these files; checking every object is present")
    elif old is not None:
        say(f"publish: --force: replacing {root} ({len(diff(old, manifest))} files differ)")
        _call(client.delete_object, manifest_url, Bucket=to.bucket, Key=manifest_url.prefix)

    entries = manifest.by_path()
    pending = [(entries[rel], path) for rel, path in files if not _object_matches(client, root, entries[rel])]
    result.skipped = sorted(set(entries) - {e.path for e, _ in pending})
    say(f"publish: uploading {len(pending)} files ({human_bytes(sum(e.size for e, _ in pending))}) to {root}")
    _upload(client, root, pending, settings, progress, result)

    stats_after = {rel: local.stat_record(path) for rel, path in files}
    changed = sorted(rel for rel in stats_before if stats_before[rel] != stats_after[rel])
    if changed:  # the manifest would describe bytes we did not upload
        raise OperationFailed(f"--from: {changed[0]} changed while publishing — stop writing to it and publish again")
    if not result.already_published:
        _call(
            client.put_object,
            manifest_url,
            Bucket=to.bucket,
            Key=manifest_url.prefix,
            Body=manifest.to_json_bytes(),
            ContentType="application/json",
        )
    if old is not None and not result.already_published:
        result.deleted = _delete_unlisted(client, root, manifest)
    result.seconds = time.monotonic() - start
    return result


def _call(fn: Callable[..., Any], url: S3Url, **kwargs: Any) -> Any:
    with s3_errors(url):
        return fn(**kwargs)


def _existing_manifest(client: Any, root: S3Url, new: Manifest, force: bool) -> Manifest | None:
    """The manifest already at the destination (None if none); refuses different content without --force."""
    url = root.child(MANIFEST_NAME)
    raw = get_bytes(client, url)
    if raw is None:
        return None
    try:
        old = parse_manifest(raw, str(url))
    except UserError:
        if force:
            return new.model_copy(update={"files": (), "total_bytes": 0})  # unreadable: replace it all
        raise UserError(f"{url}: the existing manifest is unreadable — pass --force to replace it") from None
    if (old.same_content(new) and old.commit == new.commit) or force:
        return old
    what = (
        f"commit {old.commit} is published, this is {new.commit}"
        if old.commit != new.commit
        else f"{len(diff(old, new))} files differ, e.g. {diff(old, new)[0]}"
    )
    raise UserError(
        f"{root}: already holds a different publish of "
        f"{new.model}@{new.revision} ({what}) — publish under a new --revision (hosts cache revisions forever) "
        "or pass --force to replace it"
    )


def _object_matches(client: Any, root: S3Url, entry: FileEntry) -> bool:
    """True if the object exists with this file's size and sha256 (from an earlier, maybe interrupted, run)."""
    from slabench.weights.s3 import is_not_found

    url = root.child(entry.path)
    with s3_errors(url):
        try:
            head = client.head_object(Bucket=url.bucket, Key=url.prefix)
        except Exception as exc:
            if is_not_found(exc):
                return False
            raise
    return bool(head.get("ContentLength") == entry.size and head.get("Metadata", {}).get("sha256") == entry.sha256)


def _upload(
    client: Any,
    root: S3Url,
    pending: list[tuple[FileEntry, Path]],
    settings: TransferSettings,
    progress: str,
    result: PublishResult,
) -> None:
    if not pending:
        return
    bar = Progress(sum(e.size for e, _ in pending), "publish", mode=progress)
    current = root
    try:
        # On an exception the manager's __exit__ cancels the rest and aborts multipart uploads in flight.
        with transfer_manager(client, settings) as manager:
            futures = [
                (
                    e,
                    manager.upload(
                        str(path),
                        root.bucket,
                        root.key(e.path),
                        extra_args={"Metadata": {"sha256": e.sha256}},
                        subscribers=[subscriber(bar.advance)],
                    ),
                )
                for e, path in pending
            ]
            for e, fut in futures:
                current = root.child(e.path)
                fut.result()
                result.uploaded.append(e.path)
                result.uploaded_bytes += e.size
    except (UserError, KeyboardInterrupt):
        raise
    except Exception as exc:
        mapped = describe_error(exc, current)
        if mapped is not None:
            raise mapped from None
        if isinstance(exc, OSError):
            raise OperationFailed(f"--from: cannot read {exc.filename or current}: {exc.strerror}") from None
        raise
    finally:
        bar.close()


def _delete_unlisted(client: Any, root: S3Url, manifest: Manifest) -> list[str]:
    """After a --force, remove objects under the revision that the new manifest no longer lists."""
    keep = {root.key(e.path) for e in manifest.files} | {root.key(MANIFEST_NAME)}
    stale: list[str] = []
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=root.bucket, Prefix=root.prefix + "/")
    for page in pages:
        stale.extend(o["Key"] for o in page.get("Contents", []) if o["Key"] not in keep)
    for i in range(0, len(stale), 1000):  # DeleteObjects takes at most 1000 keys
        batch = [{"Key": k} for k in stale[i : i + 1000]]
        _call(client.delete_objects, root, Bucket=root.bucket, Delete={"Objects": batch, "Quiet": True})
    return [k[len(root.prefix) + 1 :] for k in stale]
