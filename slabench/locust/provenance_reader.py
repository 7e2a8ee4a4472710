"""What serves the run (`slabench.evidence.provenance`), read beside the load from its start, for run_status.json."""

from __future__ import annotations

from typing import Any

import gevent

from slabench.evidence import provenance

JOIN_S = 0.5  # at the end: how long the stop waits for a collection still running (never holds the stop)


class ProvenanceReader:
    def __init__(self) -> None:
        self._greenlet: gevent.Greenlet | None = None

    def start(self, host: str | None, api_key_env: str, insecure: bool) -> None:
        self._greenlet = gevent.spawn(provenance.collect, host, api_key_env, insecure) if host else None

    def value(self) -> dict[str, Any] | None:
        if self._greenlet is None:
            return None
        self._greenlet.join(timeout=JOIN_S)
        value: dict[str, Any] | None = self._greenlet.value
        return value
