"""The live tier's one real vLLM server, shared by every test in the session (starting it takes a minute)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.live.vllm_server import VllmServer, build_model, venv_missing_reason

_TIMINGS: dict[str, float] = {}


@pytest.fixture(scope="session")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    reason = venv_missing_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("vllm")
    t0 = time.monotonic()
    model = build_model(work / "tiny-llama")
    _TIMINGS["model build"] = time.monotonic() - t0
    server = VllmServer.start(model, work / "vllm.log")
    _TIMINGS["vLLM start to /health"] = server.started_in_s
    try:
        yield server
    finally:
        server.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _TIMINGS:
        parts = ", ".join(f"{k} {v:.0f} s" for k, v in _TIMINGS.items())
        terminalreporter.write_line(f"live tier: {parts}")
