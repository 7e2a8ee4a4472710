"""The server's own view for the live tab — queue depth, running requests, KV-cache usage — read from the latest line
of the `server_metrics.jsonl` that `slabench.locust.scrape`'s poller process appends to beside the records (one
scrape a second, vLLM names). Reading a line is cheap; scraping and parsing `/metrics` inside Locust's event loop is
not (~10 ms a time, which would delay the timestamps of stream chunks arriving meanwhile), hence no poller here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TAIL_BYTES = 1 << 16  # a scrape line is a few kB (histogram buckets); the last one is within this


def last_line(path: Path) -> dict[str, Any] | None:
    """The last complete JSON line of a file the poller is appending to, or None when there is none yet."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            tail = f.read()
    except FileNotFoundError:
        return None
    for line in reversed(tail.split(b"\n")):
        if line.strip():
            try:
                row = json.loads(line)
            except ValueError:
                continue  # the first, cut line of the tail, or one being written
            if isinstance(row, dict):
                return row
    return None


def reading(row: dict[str, Any] | None, source: str) -> dict[str, Any]:
    """The tab's server figures from one scrape line (`slabench.evidence.scrape` format): gauges summed over engines, KV
    usage averaged (as the poller records them). A gauge the server did not expose is None."""
    if row is None:
        return {"source": source, "at": None, "error": "no scrape yet"}
    g = row.get("gauges", {})
    return {
        "source": source,
        "at": row.get("t"),
        "error": None,
        "waiting": g.get("num_requests_waiting"),
        "running": g.get("num_requests_running"),
        "kv_usage": g.get("kv_cache_usage_perc"),
    }
