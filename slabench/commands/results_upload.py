"""`slabench results upload LOCAL_DIR s3://BUCKET/PREFIX/`: ship a run's output directory to S3.

Used at the end of the Locust CI Job on EKS. Every regular file under LOCAL_DIR goes to PREFIX/<relative path>
(multipart for big files via boto3's TransferConfig), with a Content-Type so HTML reports and PNGs open in a browser.
Credentials come from boto3's default chain (IRSA on EKS); `--endpoint-url` or AWS_ENDPOINT_URL for other S3 APIs.
"""

from __future__ import annotations

import argparse
import mimetypes
import os
import time
from pathlib import Path
from typing import Any

from slabench.core.errors import UserError
from slabench.weights.s3 import OperationFailed, S3Url, describe_error, human_bytes, make_client, parse_s3_url
from slabench.weights.transfer import TransferSettings, transfer_config


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    results = subparsers.add_parser("results", help="results housekeeping (upload to S3)")
    sub = results.add_subparsers(dest="results_command", required=True)
    up = sub.add_parser(
        "upload",
        help="upload every file under LOCAL_DIR to s3://BUCKET/PREFIX/, keeping relative paths",
        description="Upload every file under LOCAL_DIR to s3://BUCKET/PREFIX/<relative path>.",
    )
    up.add_argument("local_dir", type=Path, metavar="LOCAL_DIR")
    up.add_argument("dest", metavar="s3://BUCKET/PREFIX/")
    up.add_argument("--endpoint-url", help="S3 endpoint (default: AWS_ENDPOINT_URL or AWS's own)")
    up.add_argument("--region", help="AWS region (default: AWS_REGION / AWS_DEFAULT_REGION)")
    up.set_defaults(func=run_upload)


def plan(local_dir: Path, dest: S3Url) -> list[tuple[Path, str]]:
    """(file, key) for every regular file under local_dir, sorted; keys keep the '/'-joined relative path."""
    if not local_dir.exists():
        raise UserError(f"{local_dir}: no such directory — pass the run's output directory")
    if not local_dir.is_dir():
        raise UserError(f"{local_dir}: not a directory — pass the run's output directory")
    out = []
    for dirpath, dirnames, filenames in os.walk(local_dir):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_file():
                out.append((path, dest.key(path.relative_to(local_dir).as_posix())))
    if not out:
        raise UserError(f"{local_dir}: no files to upload — did the run write its results somewhere else?")
    return out


def upload(
    local_dir: Path,
    dest: S3Url,
    *,
    endpoint_url: str | None = None,
    region: str | None = None,
    settings: TransferSettings | None = None,
    say: Any = print,
) -> list[tuple[Path, str]]:
    files = plan(local_dir, dest)
    settings = settings or TransferSettings(concurrency=8, chunk_size=16 * 1000 * 1000)
    client = make_client(endpoint_url, region, max_pool=settings.concurrency + 2)
    config = transfer_config(settings)
    done = []
    for path, key in files:
        url = S3Url(dest.bucket, key)
        ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        try:
            client.upload_file(str(path), dest.bucket, key, ExtraArgs={"ContentType": ctype}, Config=config)
        except Exception as exc:
            raise _explain(exc, url, path) from None
        say(f"uploaded {path.relative_to(local_dir).as_posix()} → {url} ({human_bytes(path.stat().st_size)})")
        done.append((path, key))
    return done


def _explain(exc: BaseException, url: S3Url, path: Path) -> BaseException:
    """boto3 re-raises PutObject failures as S3UploadFailedError; the ClientError is its __context__."""
    for e in (exc, exc.__cause__, exc.__context__):
        mapped = describe_error(e, url) if e is not None else None
        if mapped is not None:
            return mapped
    if isinstance(exc, OSError):
        return OperationFailed(f"{path}: cannot read it ({exc.strerror})")
    return OperationFailed(f"{url}: upload failed: {exc}")


def run_upload(args: argparse.Namespace) -> int:
    dest = parse_s3_url(args.dest, "results upload")
    start = time.monotonic()
    files = upload(args.local_dir, dest, endpoint_url=args.endpoint_url, region=args.region)
    total = sum(p.stat().st_size for p, _ in files)
    print(f"uploaded {len(files)} files ({human_bytes(total)}) to {dest}/ in {time.monotonic() - start:.1f} s")
    return 0
