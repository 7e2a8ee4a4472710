"""The model a run's requests name: --model, else the first one the server lists at GET /v1/models, asked once per
process and run (a run that could not ask uses "default", and the next run asks again)."""

from __future__ import annotations

import json
import logging

import gevent
import gevent.lock
from geventhttpclient import HTTPClient

from slabench.core.client import Target, parse_base_url, redact, tls_options

log = logging.getLogger("slabench")

DISCOVERY_TIMEOUT_S = 5.0  # GET /v1/models as a whole: a server that accepts and never answers must not hold users


def discover_model(target: Target, timeout: float = DISCOVERY_TIMEOUT_S) -> str | None:
    """The first model id at GET /v1/models, or None (the requests will then fail with classified errors). The
    whole exchange has `timeout` seconds: users wait on it before their first request."""
    scheme, host, port, prefix = parse_base_url(target.base_url)
    limit = min(timeout, target.connect_timeout)
    client = HTTPClient(
        host,
        port,
        ssl=scheme == "https",
        **tls_options(target.verify_tls),
        connection_timeout=limit,
        network_timeout=limit,
    )
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    try:
        with gevent.Timeout(limit, TimeoutError(f"no answer within {limit:g} s; pass --model to skip the lookup")):
            resp = client.get(prefix + "/v1/models", headers=headers)
            body = resp.read(1 << 20)
        if resp.status_code != 200:
            log.error(
                "slabench: GET %s/v1/models answered HTTP %s%s",
                target.base_url,
                resp.status_code,
                " (check the API key)" if resp.status_code in (401, 403) else "",
            )
            return None
        data = json.loads(body).get("data") or []
        return str(data[0]["id"]) if data else None
    except Exception as e:  # any failure here is reported once; each request then records its own error
        why = redact(str(e) or type(e).__name__, target.api_key)
        log.error("slabench: cannot list models at %s/v1/models: %s", target.base_url, why)
        return None
    finally:
        client.close()


class ModelLookup:
    """Per process: the model, asked for by the first user that needs it while the others wait."""

    def __init__(self, model: str) -> None:
        self._model: str | None = model or None
        self._known = self._model is not None
        self._lock = gevent.lock.Semaphore()

    def model(self, target: Target) -> str:
        with self._lock:
            if self._model is None:
                found = discover_model(target)
                self._model, self._known = found or "default", found is not None
            return self._model

    def new_run(self) -> None:
        """A model that could not be discovered (the server was not up at the first Start in the web UI) is asked
        for again, rather than refusing every later run with "default"."""
        with self._lock:
            if not self._known:
                self._model = None
