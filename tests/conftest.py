"""Shared fixtures: real local servers started as subprocesses on 127.0.0.1."""

from __future__ import annotations

# Locust patches the standard library with gevent when it is imported. Do it first, before any test module imports
# ssl (boto3, urllib3), or ssl ends up half patched (RecursionError at collection).
import os

from gevent import monkey

if os.environ.get("PYTEST_XDIST_WORKER"):  # a pytest-xdist worker (scripts/test.sh runs two)
    from tests.helpers.xdist_native import keep_execnet_native

    keep_execnet_native()

monkey.patch_all()

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _start(argv: list[str], first_line_prefix: str = "") -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline().strip()
    if not line.startswith(first_line_prefix) or proc.poll() is not None:
        proc.kill()
        raise RuntimeError(f"server did not start: {line!r} {proc.stderr.read()}")
    return proc, line


@pytest.fixture
def scripted_server(tmp_path: Path) -> Iterator[Callable[[dict], tuple[str, Callable[[], list[dict]]]]]:
    """Start tests/servers/scripted_sse_server.py with the given scripts; returns (base URL, read_log)."""
    procs = []

    def start(scripts: dict) -> tuple[str, Callable[[], list[dict]]]:
        spath, lpath = tmp_path / f"scripts{len(procs)}.json", tmp_path / f"log{len(procs)}.jsonl"
        spath.write_text(json.dumps(scripts))
        proc, port = _start(
            [sys.executable, str(ROOT / "tests" / "servers" / "scripted_sse_server.py"), str(spath), str(lpath)]
        )
        procs.append(proc)

        def read_log() -> list[dict]:
            return [json.loads(x) for x in lpath.read_text().splitlines()] if lpath.exists() else []

        return f"http://127.0.0.1:{port}", read_log

    yield start
    for p in procs:
        p.kill()
        p.wait()


@pytest.fixture
def simulator() -> Iterator[Callable[..., str]]:
    """Start `slabench simulate` (a real subprocess) with knobs as CLI flags; returns its URL."""
    procs = []

    def start(*flags: str, env: dict | None = None) -> str:
        argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", *flags]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
        line = proc.stdout.readline().strip()
        procs.append(proc)
        if not line.startswith("slabench simulator listening on "):
            raise RuntimeError(f"simulator did not start: {line!r} {proc.stderr.read()}")
        return line.rsplit(" ", 1)[-1]

    start.procs = procs  # type: ignore[attr-defined]  # a test that must signal a simulator finds it here
    yield start
    for p in procs:
        p.terminate()
        p.wait(5)


class HostileServer:
    """tests/servers/hostile_server.py running in its own process: its URL and the requests it logged."""

    def __init__(self, log: Path, mix: list[str] | None = None, tls: tuple[Path, Path] | None = None) -> None:
        self.log = log
        argv = [sys.executable, str(ROOT / "tests" / "servers" / "hostile_server.py"), str(log)]
        if mix:
            argv += ["--mix", ",".join(mix)]
        if tls:
            argv += ["--tls", *map(str, tls)]
        self.proc, port = _start(argv)
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"

    def rows(self, since: int = 0) -> list[dict]:
        """Logged lines from line `since` on (see `mark`)."""
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [json.loads(x) for x in lines[since:]]

    def mark(self) -> int:
        return len(self.log.read_text().splitlines()) if self.log.exists() else 0

    def requests(self, since: int = 0) -> list[dict]:
        """The completion requests it received (not model discovery or /metrics)."""
        return [r for r in self.rows(since) if r.get("method") == "POST"]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def hostile_server(tmp_path: Path) -> Iterator[Callable[..., HostileServer]]:
    """Start tests/servers/hostile_server.py (optionally with a --mix of behaviours); returns a HostileServer."""
    servers: list[HostileServer] = []

    def start(mix: list[str] | None = None) -> HostileServer:
        servers.append(HostileServer(tmp_path / f"hostile{len(servers)}.jsonl", mix))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: without xdist, pytest never calls it
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """scripts/test.sh runs two xdist workers. A test module runs whole on one worker, in its own order (its module
    fixtures are built once; the docs commands feed each other), and so does the live tier (its one vLLM server, a
    package fixture). xdist's own `loadgroup` cannot say this with pytest 9.2, whose node ids it can no longer tag."""
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "tests/live" if nodeid.startswith("tests/live/") else nodeid.split("::", 1)[0]

    config.option.loadscopereorder = False  # keep the order pytest_collection_modifyitems gives (longest first)
    return ModuleScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On an xdist worker, the longest go first, so neither worker is left with one of them at the end: the live
    tier, then the modules with a test marked slow. (Workers must all collect the same order: this one is fixed.)"""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow_modules = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: 0 if item.get_closest_marker("live") else 1 if item.path in slow_modules else 2)
