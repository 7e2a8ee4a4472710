"""The LLM tab's table in Locust's own web UI (its supported extension: `extended_tabs` / `extended_tables` in the
template arguments, rows under `extended_stats` in /stats/requests, which the UI polls every 2 s). Pure: a snapshot
in, rows of text out. Units are in the metric names so a value cell is one number (or a dash for "no data").
"""

from __future__ import annotations

from typing import Any

from slabench.webui.live import PCT_NAMES

TAB_KEY = "llm"
TAB_TITLE = "LLM"
NO_DATA = "—"
LATENCY_LABELS = {"ttft": "TTFT", "ttfat": "TTFAT", "itl": "ITL", "tpot": "TPOT", "e2e": "E2E", "lateness": "lateness"}


def structure(window_s: float) -> list[dict[str, str]]:
    return [
        {"key": "metric", "title": "LLM metric"},
        {"key": "window", "title": f"now / last {window_s:g} s"},
        {"key": "total", "title": "since start"},
    ]


def ms(v: float | None) -> str:
    return NO_DATA if v is None else f"{v * 1000:.1f}"


def num(v: float | None, digits: int = 1) -> str:
    return NO_DATA if v is None else f"{v:.{digits}f}"


def pct(v: float | None) -> str:
    return NO_DATA if v is None else f"{v * 100:.2f}"


def stage_text(stage: dict[str, Any] | None) -> str:
    if not stage:
        return NO_DATA
    parts = []
    if stage.get("level") is not None:
        parts.append(" ".join(f"{x}" for x in ("level", stage["level"], stage.get("unit")) if x is not None))
    if stage.get("repeat") is not None:
        parts.append(f"repeat {stage['repeat']}")
    if stage.get("phase"):
        parts.append(str(stage["phase"]))
    return " · ".join(parts) or NO_DATA


def rows(
    snap: dict[str, Any], server: dict[str, Any] | None = None, sla: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    w, t = snap["window"], snap["total"]

    def row(metric: str, window: str, total: str = "") -> dict[str, str]:
        return {"metric": metric, "window": window, "total": total}

    out = [
        row("stage (level · repeat · phase)", stage_text(snap.get("stage"))),
        row("requests in flight", NO_DATA if snap.get("in_flight") is None else str(snap["in_flight"])),
        row("requests finished", str(w["records"]), str(t["records"])),
        row("ok requests/s", num(w["requests_per_s"], 2), num(t["requests_per_s"], 2)),
        row("output tokens/s", num(w["output_tokens_per_s"]), num(t["output_tokens_per_s"])),
    ]
    for key, label in LATENCY_LABELS.items():
        if key == "lateness" and not t["open_loop"]:
            continue  # closed loop: nothing is scheduled, so nothing can be late
        if key == "ttfat" and not t["reasoning"]:
            continue  # no model reasoned: the first answer token is the first token
        for p in PCT_NAMES:
            out.append(row(f"{label} {p} (ms)", ms(w["latency"][key][p]), ms(t["latency"][key][p])))
    out.append(row("failed % (error + incomplete)", pct(w["failed_rate"]), pct(t["failed_rate"])))
    for cat in sorted(set(w["errors"]) | set(t["errors"])):
        out.append(
            row(
                f"failed % {cat}",
                pct(w["errors"].get(cat, {}).get("rate", 0.0)),
                pct(t["errors"].get(cat, {}).get("rate", 0.0)),
            )
        )
    for cat in sorted(set(w["dropped"]) | set(t["dropped"])):
        out.append(row(f"dropped {cat} (count)", str(w["dropped"].get(cat, 0)), str(t["dropped"].get(cat, 0))))
    if server is not None:
        out.append(row("server queue: waiting", num(server.get("waiting"), 0)))
        out.append(row("server: running", num(server.get("running"), 0)))
        out.append(row("server KV cache usage %", pct(server.get("kv_usage"))))
    if sla is not None:
        for c in sla.get("checks", []):
            out.append(row(f"SLA (provisional) {c['check']}", f"{c['status']}: {c['observed']} vs {c['target']}"))
    return out
