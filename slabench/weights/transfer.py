"""Parallel multipart/ranged transfers through boto3's TransferManager, shared by publish, hydrate and results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MB = 1000 * 1000


@dataclass(frozen=True)
class TransferSettings:
    concurrency: int = 16  # parallel parts across all files; in-region S3 likes 16-64 streams
    chunk_size: int = 32 * MB  # multipart part size and threshold; also the ranged-GET size on download
    max_bandwidth: int | None = None  # bytes/s cap, so a hydrate does not starve a node's serving traffic


DEFAULT_SETTINGS = TransferSettings()


def transfer_config(settings: TransferSettings) -> Any:
    from boto3.s3.transfer import TransferConfig

    return TransferConfig(
        multipart_threshold=settings.chunk_size,
        multipart_chunksize=settings.chunk_size,
        max_concurrency=settings.concurrency,
        max_bandwidth=settings.max_bandwidth,
        use_threads=True,
    )


def transfer_manager(client: Any, settings: TransferSettings) -> Any:
    from boto3.s3.transfer import create_transfer_manager

    return create_transfer_manager(client, transfer_config(settings))


def subscriber(on_bytes: Callable[[int], None]) -> Any:
    """A TransferManager subscriber that reports transferred bytes (to a progress bar).

    Downloads still start with a HeadObject: s3transfer uses its ETag as If-Match on every ranged GET, so an object
    replaced mid-download fails loudly instead of yielding a mix of two versions.
    """
    from s3transfer.subscribers import BaseSubscriber

    class _Subscriber(BaseSubscriber):  # type: ignore[misc]  # s3transfer ships no types: its base is Any
        def on_progress(self, future: Any, bytes_transferred: int, **kwargs: Any) -> None:
            on_bytes(bytes_transferred)

    return _Subscriber()
