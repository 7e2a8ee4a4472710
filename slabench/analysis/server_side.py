"""The server's side of a sweep, for the report: queue depth and KV usage over time from each run's scraped
`/metrics` (`server_metrics.jsonl` beside its records), and the client-vs-server cross-check per run, so a reader sees
the harness and the server agree. Runs without scrapes (a target without /metrics) are simply absent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from slabench.core.sinks import read_records
from slabench.evidence.crosscheck import crosscheck
from slabench.evidence.scrape import read_scrapes, series


def _runs(summary: Any) -> list[tuple[int, int, Path]]:
    return [(lv.level, r.repeat, Path(r.path)) for lv in summary.levels for r in lv.runs]


def collect(summary: Any) -> list[dict[str, Any]]:
    """Per run that has scrapes: its level, repeat, plot series and cross-check (None when no window fits)."""
    out = []
    for level, repeat, path in _runs(summary):
        scrapes = read_scrapes(path.parent if path.suffix else path)
        if not scrapes:
            continue
        out.append({"level": level, "repeat": repeat, "series": series(scrapes),
                    "check": crosscheck(read_records(path), scrapes)})  # fmt: skip
    return out


def _ms(v: float | None) -> str:
    return "–" if v is None else f"{v * 1000:.1f}"


def crosscheck_rows(runs: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for r in runs:
        c = r["check"]
        if c is None:
            rows.append([str(r["level"]), str(r["repeat"]), *["no window"] * 5])
            continue
        tt, e2e = c["ttft"], c["e2e"]
        tokens = " / ".join(
            f"{c[k]['client']:,} vs {c[k]['server'] or 0:,.0f}" for k in ("prompt_tokens", "generation_tokens")
        )
        rows.append([str(r["level"]), str(r["repeat"]), f"{_ms(tt['client_mean'])} / {_ms(tt['server_mean'])}",
                     f"{_ms(e2e['client_mean'])} / {_ms(e2e['server_mean'])}", tokens,
                     "yes" if c["prompt_tokens"]["equal"] and c["generation_tokens"]["equal"] else "no",
                     {True: "yes", False: "NO", None: "–"}[c["agree"]]])  # fmt: skip
    return rows


CROSSCHECK_HEADER = ["level", "repeat", "TTFT mean ms client / server", "E2E mean ms client / server",
                     "tokens prompt / generated: client vs server", "tokens equal", "agree"]  # fmt: skip
