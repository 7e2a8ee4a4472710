"""A real S3 API for tests: `python -m moto.server` on a free 127.0.0.1 port, as a subprocess.

Usage (any test module; this is deliberately not a conftest):

    from tests.helpers.moto_server import MotoServer, moto_server, aws_env

    with moto_server() as url:                  # just the endpoint URL
        ...
    with MotoServer() as s3:                    # the endpoint plus the server's request log
        s3.url; s3.requests(method="GET", path_prefix="/bucket/model/"); s3.reset()

The server writes one werkzeug log line per HTTP request to its stderr (a file here), so `requests()` counts what
actually reached the server, independent of the client under test. `aws_env(url)` gives the environment a boto3
client (in a subprocess, too) needs to talk to it: dummy credentials, a region, and `AWS_ENDPOINT_URL`.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.ports import free_port

# 127.0.0.1 - - [02/Dec/2026 12:54:55] "GET /bucket/key%20x HTTP/1.1" 206 -
_LOG_LINE = re.compile(r'"(?P<method>[A-Z]+) (?P<target>\S+) HTTP/[\d.]+" (?P<status>\d{3})')
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # werkzeug colours its log lines when click is installed


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # URL path, still percent-encoded, without the query string
    query: str
    status: int


def aws_env(url: str, region: str = "us-east-1") -> dict[str, str]:
    """Environment variables that point boto3 (default chain) at the moto server with dummy credentials."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
        "AWS_ENDPOINT_URL": url,
        # Never read the developer's real ~/.aws files in tests.
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


class MotoServer:
    """Start/stop one moto S3 server process; read its request log."""

    def __init__(self, start_timeout_s: float = 30.0):
        self.start_timeout_s = start_timeout_s
        self.url = ""
        self._proc: subprocess.Popen | None = None
        self._logdir: tempfile.TemporaryDirectory | None = None
        self._log_path: Path | None = None

    def start(self) -> MotoServer:
        self._logdir = tempfile.TemporaryDirectory(prefix="moto-")
        self._log_path = Path(self._logdir.name) / "server.log"
        for _attempt in range(3):  # the free port can be taken between probe and bind: retry on a new one
            port = free_port()
            with open(self._log_path, "wb") as log:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                    start_new_session=True,  # a Ctrl-C in the test runner must not reach it first
                )
            self.url = f"http://127.0.0.1:{port}"
            if self._wait_ready():
                return self
            self._kill()
        log = self._log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"moto server did not start on 127.0.0.1; its log ends with:\n{log}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/moto-api/", timeout=1):
                    return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)
        return False

    def _kill(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(timeout=5)
        self._proc = None

    def stop(self) -> None:
        self._kill()
        if self._logdir is not None:
            self._logdir.cleanup()
            self._logdir = None

    def __enter__(self) -> MotoServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def env(self, region: str = "us-east-1") -> dict[str, str]:
        return aws_env(self.url, region)

    def reset(self) -> None:
        """Drop every bucket and object (moto's own reset API)."""
        req = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def requests(self, method: str | None = None, path_prefix: str = "") -> list[Request]:
        """Every S3 request the server has logged so far (moto's own /moto-api/ calls excluded), oldest first."""
        out = []
        for line in self._log_path.read_text(errors="replace").splitlines():
            m = _LOG_LINE.search(_ANSI.sub("", line))
            if not m:
                continue
            path, _, query = m["target"].partition("?")
            if path.startswith("/moto-api"):
                continue
            if method is not None and m["method"] != method:
                continue
            if not path.startswith(path_prefix):
                continue
            out.append(Request(m["method"], path, query, int(m["status"])))
        return out

    def mark(self) -> int:
        """The number of requests logged so far; pass to `requests_since` to see only what came after."""
        return len(self.requests())

    def requests_since(self, mark: int, method: str | None = None, path_prefix: str = "") -> list[Request]:
        everything = self.requests()[mark:]
        return [r for r in everything if (method is None or r.method == method) and r.path.startswith(path_prefix)]


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """Run a moto S3 server for the duration of the block; yield its endpoint URL."""
    with MotoServer() as server:
        yield server.url
