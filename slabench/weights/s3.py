"""S3 plumbing shared by weights and results upload: s3:// URLs, one client factory, one-line error messages.

boto3 is imported lazily so a command that never talks to S3 (a no-op hydrate) does not pay for it.
Credentials come from boto3's default chain only (env, ~/.aws, IRSA web identity on EKS); the endpoint from
`--endpoint-url` or boto3's own `AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_S3`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from slabench.core.errors import ExitCode, UserError
from slabench.core.extras import require

# S3 bucket naming rules (general purpose buckets): 3-63 chars, lowercase letters, digits, dots, hyphens.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class OperationFailed(UserError):
    """Not the user's typo but still one clear line: S3 data is corrupt, the disk is full, the network is down."""

    exit_code = ExitCode(1)  # a failed operation, not a grade: weights commands have no verdict to give


@dataclass(frozen=True)
class S3Url:
    bucket: str
    prefix: str  # no leading or trailing slash; "" for the bucket root

    def key(self, *parts: str) -> str:
        return "/".join(p.strip("/") for p in (self.prefix, *parts) if p.strip("/"))

    def child(self, *parts: str) -> S3Url:
        return S3Url(self.bucket, self.key(*parts))

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse_s3_url(text: str, what: str = "S3 URL") -> S3Url:
    """`s3://bucket[/prefix...]` → S3Url. Any other shape is a UserError naming the expected form."""
    if not text.startswith("s3://"):
        raise UserError(f"{what}: {text!r} is not an s3:// URL — use s3://BUCKET/PREFIX")
    bucket, _, prefix = text[len("s3://") :].partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise UserError(
            f"{what}: {bucket!r} is not a valid bucket name — 3-63 lowercase letters, digits, dots or hyphens"
        )
    parts = [p for p in prefix.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise UserError(f"{what}: {text!r} contains '.' or '..' path segments — spell the prefix out")
    return S3Url(bucket, "/".join(parts))


def region_from_env(explicit: str | None = None) -> str | None:
    return explicit or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None


# An endpoint that accepts connections and never answers must fail in well under a minute, not after 5 × 120 s:
# S3 answers a request's first byte in milliseconds, so 10 s without a byte (per read, also mid-transfer) is a dead
# endpoint, and 3 tries bound the wait at ~35 s with the retry back-off.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 10.0
MAX_ATTEMPTS = 3


def make_client(endpoint_url: str | None = None, region: str | None = None, max_pool: int = 10) -> Any:
    """An S3 client from the default credential chain, with a connection pool sized for parallel transfers."""
    require("boto3", "S3")
    import boto3
    from botocore.config import Config

    config = Config(
        max_pool_connections=max_pool,
        retries={"max_attempts": MAX_ATTEMPTS, "mode": "standard"},
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
    )
    # A private session: boto3's default session is shared state and not safe across threads.
    session = boto3.session.Session()
    try:
        return session.client(
            "s3", endpoint_url=endpoint_url or None, region_name=region_from_env(region), config=config
        )
    except ValueError as e:  # botocore: "Invalid endpoint: ...", bad region names
        raise UserError(f"S3 client: {e} — check --endpoint-url / AWS_ENDPOINT_URL and AWS_REGION") from None


@contextmanager
def s3_errors(url: S3Url | str) -> Iterator[None]:
    """Inside the block, an S3/AWS failure becomes its one-line error; our own errors and the rest pass through."""
    try:
        yield
    except UserError:
        raise
    except Exception as exc:
        mapped = describe_error(exc, url)
        if mapped is None:
            raise
        raise mapped from None


def describe_error(exc: BaseException, url: S3Url | str) -> UserError | None:
    """Map a boto3/botocore failure to a one-line error; None if it is not an S3/AWS error at all."""
    from botocore import exceptions as bx

    if isinstance(exc, bx.NoCredentialsError | bx.PartialCredentialsError):
        return UserError(
            f"{url}: no AWS credentials found — set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, "
            "or run with an IRSA service account"
        )
    if isinstance(exc, bx.ReadTimeoutError | bx.ConnectTimeoutError):
        return OperationFailed(
            f"{url}: no answer from the S3 endpoint ({exc.kwargs.get('endpoint_url') or 'AWS'}) in "
            f"{READ_TIMEOUT_S:g} s, {MAX_ATTEMPTS} tries — check --endpoint-url / AWS_ENDPOINT_URL and the network"
        )
    if isinstance(exc, bx.ConnectionError | bx.HTTPClientError):
        return OperationFailed(f"{url}: cannot reach the S3 endpoint ({exc}) — check the network, AWS_ENDPOINT_URL")
    if isinstance(exc, bx.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        bucket = url.bucket if isinstance(url, S3Url) else str(url)
        if code == "NoSuchBucket":
            return UserError(f"{url}: bucket '{bucket}' does not exist — check the bucket name in the s3:// URL")
        if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken"):
            return UserError(
                f"{url}: access denied ({code}) — check the credentials / IAM role allow this bucket and prefix"
            )
        if code in ("NoSuchKey", "404") or status == 404:
            return UserError(f"{url}: not found — check the s3:// URL")
        if code == "PermanentRedirect":
            return UserError(f"{url}: the bucket is in another region — set AWS_REGION to the bucket's region")
        return OperationFailed(f"{url}: S3 error {code or status}: {err.get('Message', exc)}")
    if isinstance(exc, bx.BotoCoreError):
        return OperationFailed(f"{url}: {exc}")
    return None


def is_not_found(exc: BaseException) -> bool:
    """True for a missing key (not a missing bucket: that is a different mistake with a different fix)."""
    from botocore.exceptions import ClientError

    if not isinstance(exc, ClientError):
        return False
    code = str(exc.response.get("Error", {}).get("Code", ""))
    return code in ("NoSuchKey", "404", "NotFound")


def get_bytes(client: Any, url: S3Url) -> bytes | None:
    """GET a small object whole; None when the key does not exist; any other failure → one-line error."""
    with s3_errors(url):
        try:
            body: bytes = client.get_object(Bucket=url.bucket, Key=url.prefix)["Body"].read()
            return body
        except Exception as exc:
            if is_not_found(exc):
                return None
            raise


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def parse_size(text: str) -> int:
    """'64MB', '8MiB', '500k', '1048576' → bytes (decimal units, *iB binary). For --chunk-size and friends."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*", text.lower())
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 64MB, 8MiB, 1048576)")
    number, unit, binary = float(m[1]), m[2], m[3]
    base = 1024 if binary else 1000
    power = " kmgt".index(unit) if unit else 0
    return int(number * base**power)
