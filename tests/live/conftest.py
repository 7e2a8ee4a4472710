"""The live tier's one real vLLM server, shared by every live test (starting it takes a minute).

With two cores or more, the server has the first core to itself and the tests (Locust among them) the rest. Sharing
them, vLLM's engine (which polls with `sched_yield` while it works) kept Locust's event loop from running for up to
1.25 s at a time: its users idled between requests and its stamps were late (docs/sla.md, "Starved by other
processes"). Pinned, Locust's loop was never 5 ms late, and vLLM answered as fast on one core (16.4–16.7 requests/s
at 8 users) as it had on two (17).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from tests.live.vllm_server import VllmServer, build_model, venv_missing_reason

_TIMINGS: dict[str, float] = {}


# Package scope: the server stops once the last live test is done (the live tests run one after another, on one xdist
# worker: tests/conftest.py), rather than idle on its core while the rest of the suite runs.
@pytest.fixture(scope="package")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    reason = venv_missing_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("vllm")
    t0 = time.monotonic()
    model = build_model(work / "tiny-llama")
    _TIMINGS["model build"] = time.monotonic() - t0
    ours = os.sched_getaffinity(0)
    server_cores = {min(ours)} if len(ours) >= 2 else None
    server = VllmServer.start(model, work / "vllm.log", cpus=server_cores)
    _TIMINGS["vLLM start to /health"] = server.started_in_s
    if server_cores:
        os.sched_setaffinity(0, ours - server_cores)  # inherited by every Locust and slabench process a test starts
    try:
        yield server
    finally:
        os.sched_setaffinity(0, ours)
        server.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _TIMINGS:
        parts = ", ".join(f"{k} {v:.0f} s" for k, v in _TIMINGS.items())
        terminalreporter.write_line(f"live tier: {parts}")
