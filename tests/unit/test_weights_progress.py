"""Progress reporting: log lines for init-container logs, a rich bar on a terminal, safe from many threads."""

from __future__ import annotations

import io
import threading

from slabench.weights.progress import Progress


def test_log_mode_prints_bytes_percent_and_rate():
    out = io.StringIO()
    p = Progress(2_000_000, "hydrate", mode="log", stream=out, every_s=0)
    p.advance(500_000)
    p.advance(1_500_000)
    p.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("hydrate: 500.00 KB / 2.00 MB (25%) ")
    assert lines[-1].startswith("hydrate: 2.00 MB / 2.00 MB (100%)") and lines[-1].endswith("/s")


def test_advance_from_many_threads_counts_every_byte():
    p = Progress(8 * 10_000, "x", mode="none")
    threads = [threading.Thread(target=lambda: [p.advance(1) for _ in range(10_000)]) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert p.done == 80_000


def test_bar_mode_renders_and_stops():
    out = io.StringIO()
    p = Progress(1000, "hydrate", mode="bar", stream=out)
    p.advance(1000)
    p.close()
    p.close()  # idempotent
    assert "hydrate" in out.getvalue()


def test_auto_mode_picks_log_when_not_a_terminal():
    assert Progress(1, "x", stream=io.StringIO()).mode == "log"
