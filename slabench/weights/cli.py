"""`slabench weights {publish,hydrate,status}`: the two-tier model weight cache from the command line.

Exit codes: 0 done; 3 a mistake to fix in the command (bad URL, wrong bucket, missing manifest, refused overwrite);
1 an operational failure (checksum mismatch in S3, disk full, S3 unreachable); `status` exits 1 when a cache is
not complete or does not match S3.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from slabench.weights import local
from slabench.weights.s3 import human_bytes, parse_s3_url, parse_size
from slabench.weights.transfer import MB, TransferSettings


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def _s3_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    s3 = common.add_argument_group("S3 (credentials: boto3's default chain — env, ~/.aws, IRSA)")
    s3.add_argument("--endpoint-url", help="S3 endpoint (default: AWS_ENDPOINT_URL or AWS's own)")
    s3.add_argument("--region", help="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION)")
    return common


def _transfer_options() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    t = common.add_argument_group("transfer")
    t.add_argument("--concurrency", type=_positive_int, default=16, help="parallel part transfers (default 16)")
    t.add_argument("--chunk-size", type=_size, default=32 * MB, help="multipart part / ranged GET size (default 32MB)")
    t.add_argument("--max-bandwidth", type=_size, help="cap in bytes/s, e.g. 500MB (default: none)")
    t.add_argument(
        "--progress",
        choices=("auto", "bar", "log", "none"),
        default="auto",
        help="progress bar on a terminal, a log line every 5 s otherwise (default auto)",
    )
    return common


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s3, transfer = _s3_options(), _transfer_options()
    weights = subparsers.add_parser(
        "weights",
        help="model weight cache: publish to S3 once, hydrate host NVMe fast",
        description="Hugging Face once → S3 durably (publish) → host NVMe fast (hydrate). See docs/weights.md.",
    )
    sub = weights.add_subparsers(dest="weights_command", required=True)

    p = sub.add_parser(
        "publish",
        parents=[s3, transfer],
        help="upload a local snapshot and its manifest to s3://…/MODEL/REVISION/",
        description="Upload a model snapshot (plain directory or Hugging Face cache) with a manifest of sizes and "
        "sha256s. Resumable: a re-run skips objects already uploaded.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from", dest="from_dir", type=Path, help="model directory, HF hub cache or snapshot dir")
    src.add_argument("--hf-repo", help="download ORG/NAME from Hugging Face first (needs huggingface_hub)")
    p.add_argument("--hf-cache-dir", type=Path, help="huggingface_hub cache dir for --hf-repo")
    p.add_argument("--to", required=True, help="s3://BUCKET/PREFIX; files go to PREFIX/MODEL/REVISION/")
    p.add_argument("--model", required=True, help="model name, e.g. meta-llama/Llama-3.1-8B-Instruct")
    p.add_argument("--revision", required=True, help="commit sha, tag or branch (HF refs like main resolve)")
    p.add_argument("--force", action="store_true", help="replace a different publish of the same revision")
    p.set_defaults(func=run_publish)

    h = sub.add_parser(
        "hydrate",
        parents=[s3, transfer],
        help="make a host-local copy of a published revision, verified (no-op when already complete)",
        description="Download a published revision to a host path, verifying every file's sha256. Takes a lock "
        "so concurrent hydrates of one path download once; a completion marker makes the next run a no-op.",
    )
    h.add_argument("--source", required=True, help="s3://BUCKET/PREFIX/MODEL/REVISION")
    h.add_argument("--dest", required=True, type=Path, help="e.g. /mnt/k8s-disks/0/models/MODEL/REVISION")
    h.add_argument("--verify", action="store_true", help="re-hash every local file (finds silent bit rot)")
    h.add_argument("--refresh", action="store_true", help="compare with the manifest in S3 even when complete")
    h.add_argument("--lock-timeout", type=float, help="seconds to wait for another hydrate (default: forever)")
    h.add_argument("--keep-free", type=_size, default=0, help="refuse unless this much stays free, e.g. 20GB")
    h.set_defaults(func=run_hydrate)

    st = sub.add_parser(
        "status",
        parents=[s3],
        help="what is cached where, and whether it matches S3",
        description="Inspect host caches (a cache dir or a root to search) and/or list what is published in S3. "
        "Exits 1 when a cache is not complete or differs from S3.",
    )
    st.add_argument("paths", nargs="*", type=Path, help="cache directories or roots, e.g. /mnt/k8s-disks/0/models")
    st.add_argument("--source", help="list the revisions published under this s3:// prefix")
    st.add_argument("--offline", action="store_true", help="do not compare caches with S3")
    st.add_argument("--verify", action="store_true", help="re-hash cached files against the manifest")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=run_status)


def _settings(args: argparse.Namespace) -> TransferSettings:
    return TransferSettings(concurrency=args.concurrency, chunk_size=args.chunk_size, max_bandwidth=args.max_bandwidth)


def _ms(start: float) -> str:
    return f"{(time.monotonic() - start) * 1000:.1f} ms"


def _mb_s(rate: float) -> str:
    return f"{rate:.0f} MB/s" if rate >= 100 else f"{rate:.2g} MB/s"


def _say(line: str) -> None:
    print(line, flush=True)


def run_publish(args: argparse.Namespace) -> int:
    from slabench.weights.publish import publish
    from slabench.weights.source import fetch_from_hugging_face

    to = parse_s3_url(args.to, "--to")
    src = args.from_dir
    if args.hf_repo:
        _say(f"publish: downloading {args.hf_repo}@{args.revision} from Hugging Face")
        src = fetch_from_hugging_face(args.hf_repo, args.revision, args.hf_cache_dir)
    r = publish(
        src,
        to,
        args.model,
        args.revision,
        force=args.force,
        settings=_settings(args),
        endpoint_url=args.endpoint_url,
        region=args.region,
        progress=args.progress,
        say=_say,
    )
    rate = f" ({_mb_s(r.uploaded_bytes / 1e6 / r.seconds)})" if r.uploaded_bytes and r.seconds > 0 else ""
    _say(
        f"publish: done in {r.seconds:.1f} s: uploaded {len(r.uploaded)} files ({human_bytes(r.uploaded_bytes)})"
        f"{rate}, {len(r.skipped)} already present" + (f", deleted {len(r.deleted)} stale objects" if r.deleted else "")
    )
    _say(f"publish: hydrate with: slabench weights hydrate --source {r.root} --dest /mnt/k8s-disks/0/models/…")
    return 0


def run_hydrate(args: argparse.Namespace) -> int:
    source = parse_s3_url(args.source, "--source")
    if not (args.verify or args.refresh):
        # The restart path, before importing boto3 or pydantic: a marker read and one stat per file.
        start = time.monotonic()
        if local.complete_marker_for(args.dest, str(source)):
            _say(f"hydrate: {args.dest} already complete ({source}); nothing fetched [{_ms(start)}]")
            return 0

    from slabench.weights.hydrate import hydrate

    r = hydrate(
        source,
        args.dest,
        settings=_settings(args),
        endpoint_url=args.endpoint_url,
        region=args.region,
        verify=args.verify,
        refresh=args.refresh,
        lock_timeout_s=args.lock_timeout,
        keep_free=args.keep_free,
        progress=args.progress,
        say=_say,
    )
    if r.noop:
        how = "completed by another hydrate while we waited" if r.waited else "already complete"
        _say(f"hydrate: {r.dest} {how} ({r.source}); nothing fetched [{r.seconds * 1000:.1f} ms]")
        return 0
    rate = f" at {_mb_s(r.mb_per_s)}" if r.mb_per_s else ""
    _say(
        f"hydrate: {r.dest} complete in {r.seconds:.1f} s: fetched {len(r.fetched)} files "
        f"({human_bytes(r.fetched_bytes)}){rate}; {r.trusted} unchanged, {r.rehashed} re-hashed"
    )
    if r.extra:
        _say(
            f"hydrate: warning: {len(r.extra)} files in {r.dest} are not in the manifest (e.g. {r.extra[0]}); "
            "vLLM may load them — remove them"
        )
    return 0


def run_status(args: argparse.Namespace) -> int:
    from slabench.core.errors import UserError
    from slabench.weights.s3 import make_client
    from slabench.weights.status import compare_with_s3, find_caches, list_published, local_status

    if not args.paths and not args.source:
        raise UserError("status: give cache PATHs (e.g. /mnt/k8s-disks/0/models) and/or --source s3://BUCKET/PREFIX")
    client = None if (args.offline and not args.source) else make_client(args.endpoint_url, args.region)
    caches, missing_roots = [], []
    for root in args.paths:
        found = find_caches(root) if root.is_dir() else []
        if not found:
            missing_roots.append(str(root))
        for dest in found:
            s = local_status(dest, verify=args.verify)
            if not args.offline:
                compare_with_s3(s, dest, client)
            caches.append(s)
    published = list_published(client, parse_s3_url(args.source, "--source")) if args.source else []

    if args.json:
        doc = {
            "schema_version": 1,
            "caches": [c.as_dict() for c in caches],
            "not_found": missing_roots,
            "published": published,
        }
        print(json.dumps(doc, indent=2))
    else:
        for root in missing_roots:
            print(f"{root}: no weight caches here")
        for c in caches:
            what = f"{c.model}@{c.revision}" if c.model else "unknown model"
            s3 = "" if c.s3 is None else f"; S3: {c.s3}"
            print(f"{c.path}: {c.state}: {what}, {c.files} files, {human_bytes(c.total_bytes)}{s3}")
            if c.changed:
                print(f"  changed since verified: {', '.join(c.changed)}")
            if c.corrupt:
                print(f"  sha256 differs from the manifest: {', '.join(c.corrupt)}")
            if c.source:
                print(f"  source: {c.source}")
        for p in published:
            print(
                f"{p['source']}: {p['model']}@{p['revision']} commit={p['commit'] or '-'} "
                f"{p['files']} files {human_bytes(p['total_bytes'])} published {p['created']}"
            )
        if args.source and not published:
            print(f"{args.source}: nothing published here")
    return 0 if all(c.ok for c in caches) and not missing_roots else 1
