"""Byte progress for long transfers: a rich bar on a terminal, periodic log lines otherwise (init-container logs).

Transfer threads call `advance` concurrently; everything here is guarded by one lock.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import IO, Any

from slabench.weights.s3 import human_bytes


class Progress:
    def __init__(self, total: int, label: str, mode: str = "auto", stream: IO[str] | None = None, every_s: float = 5):
        self.total = total
        self.label = label
        self.stream = stream or sys.stderr
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "log"
        self.mode = mode
        self.every_s = every_s
        self.done = 0
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._last_log = self._start
        self._bar: Any = None
        self._task: Any = None
        if mode == "bar":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                TextColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                TimeRemainingColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self._task = self._bar.add_task(label, total=total)
            self._bar.start()

    def advance(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self._bar is not None:
                self._bar.update(self._task, completed=self.done)
            elif self.mode == "log":
                now = time.monotonic()
                if now - self._last_log >= self.every_s:
                    self._last_log = now
                    self._log_line(now)

    def _log_line(self, now: float) -> None:
        pct = 100.0 * self.done / self.total if self.total else 100.0
        rate = self.done / max(now - self._start, 1e-9)
        print(
            f"{self.label}: {human_bytes(self.done)} / {human_bytes(self.total)} ({pct:.0f}%) {human_bytes(rate)}/s",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar = None
