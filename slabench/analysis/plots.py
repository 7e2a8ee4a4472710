"""PNG plots of a `SweepSummary` (matplotlib's Agg canvas on explicit Figures: no pyplot, no global state).

Every plot shows both views where they apply: the across-repeat mean with error bars of ± one standard deviation,
the 95 % interval as a shaded band, each run's value as a faint dot, and the pooled value as a hollow marker.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from slabench.analysis.summary import LevelSummary, SweepSummary

# Keyword arguments for matplotlib's plotting calls (each its own type: Any).
RUN_DOT: dict[str, Any] = {"color": "0.55", "s": 12, "zorder": 2, "label": "each run"}
MEAN_BAR: dict[str, Any] = {"fmt": "o-", "capsize": 4, "lw": 1.8, "ms": 5, "zorder": 4}
POOLED: dict[str, Any] = {"marker": "D", "facecolors": "none", "s": 30, "zorder": 5}


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)  # type: ignore[no-untyped-call]  # the Agg backend is not annotated
    return buf.getvalue()


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=(7.2, 4.2), dpi=110, layout="constrained")
    return fig, fig.add_subplot()


def _level_axis(ax: Axes, summary: SweepSummary) -> None:
    levels = [lv.level for lv in summary.levels]
    if levels and min(levels) > 0 and max(levels) / min(levels) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [f"{lv:g}" for lv in levels])
    ax.minorticks_off()
    ax.ticklabel_format(axis="y", useOffset=False)
    ax.set_xlabel(f"{summary.load_name} ({summary.level_unit})")
    ax.grid(alpha=0.3)


def _series(
    ax: Axes, levels: list[LevelSummary], key: str, label: str, color: str, scale: float, runs: bool = True
) -> bool:
    # (level, mean, estimate) of the levels where the metric has a mean
    pts = [
        (lv.level, mean, e) for lv in levels if (e := lv.metrics.get(key)) is not None and (mean := e.mean) is not None
    ]
    if not pts:
        return False
    if runs:
        xs = [lv.level for lv in levels for r in lv.runs if r.metrics.get(key) is not None]
        ys = [v * scale for lv in levels for r in lv.runs if (v := r.metrics.get(key)) is not None]
        ax.scatter(xs, ys, **{**RUN_DOT, "label": f"{label}: each run"})
    x = [lv for lv, _, _ in pts]
    y = [mean * scale for _, mean, _ in pts]
    err = [(e.std or 0.0) * scale for _, _, e in pts]
    ax.errorbar(x, y, yerr=err, color=color, label=f"{label}: mean ± std", **MEAN_BAR)
    # both bounds or none (a hand-edited summary with only one used to stop the plot with a TypeError)
    ci = [(lv, low, high) for lv, _, e in pts if (low := e.ci95_low) is not None and (high := e.ci95_high) is not None]
    if ci:
        ax.fill_between(
            [lv for lv, _, _ in ci],
            [low * scale for _, low, _ in ci],
            [high * scale for _, _, high in ci],
            color=color,
            alpha=0.18,
            label=f"{label}: 95% CI",
        )
    pooled = [(lv, e.pooled * scale) for lv, _, e in pts if e.pooled is not None]
    ax.scatter([p[0] for p in pooled], [p[1] for p in pooled], edgecolors=color, label=f"{label}: pooled", **POOLED)
    return True


def _cliff_line(ax: Axes, summary: SweepSummary) -> None:
    c = summary.cliff
    if c.get("status") == "found":
        ax.axvline(c["level"], color="crimson", ls="--", lw=1.2, label=f"cliff ({c['reason']}) at {c['level']}")


def _no_data(ax: Axes) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.4")


def _trend(ax: Axes, summary: SweepSummary, key: str, scale: float) -> None:
    """The cliff method's low-load trend and its candidate threshold (ratio × trend), when `key` is its metric."""
    lat = summary.cliff.get("latency") or {}
    t = lat.get("trend")
    if lat.get("metric") != key or not t:
        return
    ratio = (summary.cliff.get("options") or {}).get("latency_ratio", 1.5)
    xs = [lv.level for lv in summary.levels]
    ys = [(t["at_intercept"] + t["slope_per_level"] * (x - t["intercept_level"])) * scale for x in xs]
    ax.plot(xs, ys, ls=":", color="0.35", label="low-load trend")
    ax.plot(xs, [y * ratio for y in ys], ls="--", color="0.65", lw=0.9, label=f"{ratio:g}× trend (cliff candidates)")


def latency_plot(summary: SweepSummary, key: str = "ttft_p95", title: str = "TTFT p95") -> bytes:
    fig, ax = _figure()
    if not _series(ax, summary.levels, key, title, "tab:blue", 1000.0):
        _no_data(ax)
    _trend(ax, summary, key, 1000.0)
    _cliff_line(ax, summary)
    _level_axis(ax, summary)
    ax.set_ylabel(f"{title} (ms)")
    ax.set_title(f"{title} vs {summary.load_name}")
    _legend(ax)
    return _png(fig)


def itl_plot(summary: SweepSummary) -> bytes:
    fig, ax = _figure()
    any_ = _series(ax, summary.levels, "itl_p50", "ITL p50", "tab:green", 1000.0, runs=False)
    any_ |= _series(ax, summary.levels, "itl_p95", "ITL p95", "tab:orange", 1000.0, runs=False)
    if not any_:
        _no_data(ax)
    _cliff_line(ax, summary)
    _level_axis(ax, summary)
    ax.set_ylabel("inter-token latency (ms)")
    ax.set_title(f"ITL vs {summary.load_name}")
    _legend(ax)
    return _png(fig)


def _legend(ax: Axes) -> None:
    if ax.get_legend_handles_labels()[0]:  # nothing drawn (no level has data): no empty legend box
        ax.legend(fontsize=7, loc="upper left")


def throughput_plot(summary: SweepSummary) -> bytes:
    """Requests/s per level with the linear-scaling line from the lowest level (where a plateau shows)."""
    fig, ax = _figure()
    if _series(ax, summary.levels, "throughput_rps", "throughput", "tab:purple", 1.0):
        # (level, req/s) of the lowest level with a throughput above 0
        first = next(
            ((lv.level, e.mean) for lv in summary.levels if (e := lv.metrics.get("throughput_rps")) and e.mean), None
        )
        if first is not None:  # every level at 0 req/s (nothing answered) has no scaling line to draw
            base = first[1] / first[0]
            xs = [lv.level for lv in summary.levels]
            ax.plot(xs, [base * x for x in xs], ls=":", color="0.4", label="linear scaling from the lowest level")
    else:
        _no_data(ax)
    _cliff_line(ax, summary)
    _level_axis(ax, summary)
    ax.set_ylabel("OK requests / s")
    ax.set_title(f"Throughput vs {summary.load_name}")
    _legend(ax)
    return _png(fig)


def throughput_latency_plot(summary: SweepSummary, latency_key: str = "ttft_p95") -> bytes:
    """Output tokens/s against latency, one point per level (mean ± std both ways), labelled with the level."""
    fig, ax = _figure()
    # (level, tokens/s mean, its std, latency mean in ms, its std) where both figures have a mean
    pts = [
        (lv.level, t.mean, t.std or 0, lat.mean * 1000, (lat.std or 0) * 1000)
        for lv in summary.levels
        if (t := lv.metrics.get("output_tokens_per_s")) is not None
        and (lat := lv.metrics.get(latency_key)) is not None
        and t.mean is not None
        and lat.mean is not None
    ]
    if pts:
        x = [p[1] for p in pts]
        y = [p[3] for p in pts]
        ax.errorbar(
            x,
            y,
            xerr=[p[2] for p in pts],
            yerr=[p[4] for p in pts],
            color="tab:blue",
            label="mean ± std per level",
            **MEAN_BAR,
        )
        for level, xi, _, yi, _ in pts:
            ax.annotate(f"{level:g}", (xi, yi), textcoords="offset points", xytext=(5, 5), fontsize=8)
        _legend(ax)
    else:
        _no_data(ax)
    ax.grid(alpha=0.3)
    ax.set_xlabel("output tokens / s")
    ax.set_ylabel(f"{latency_key.replace('_', ' ').upper()} (ms)")
    ax.set_title(f"Throughput vs latency (labels: {summary.load_name}, {summary.level_unit})")
    return _png(fig)


def error_plot(summary: SweepSummary) -> bytes:
    fig, ax = _figure()
    any_ = _series(ax, summary.levels, "error_rate", "error rate", "tab:red", 100.0)
    any_ |= _series(ax, summary.levels, "incomplete_rate", "incomplete rate", "tab:brown", 100.0, runs=False)
    if not any_:
        _no_data(ax)
    _level_axis(ax, summary)
    ax.set_ylabel("% of answered requests")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Errors vs {summary.load_name}")
    _legend(ax)
    return _png(fig)


PLOTS: dict[str, tuple[str, Callable[[SweepSummary], bytes]]] = {
    "ttft_p95": ("TTFT p95 vs load", latency_plot),
    "itl": ("Inter-token latency vs load", itl_plot),
    "throughput": ("Throughput vs load", throughput_plot),
    "throughput_latency": ("Throughput vs latency", throughput_latency_plot),
    "errors": ("Error rate vs load", error_plot),
}


def render_all(summary: SweepSummary, server: list[dict[str, Any]]) -> dict[str, tuple[str, bytes]]:
    """{file stem: (title, PNG bytes)} for every plot; the server's queue and KV plot when runs were scraped."""
    plots = {name: (title, fn(summary)) for name, (title, fn) in PLOTS.items()}
    if server:
        plots["server_queue_kv"] = ("Queue depth and KV usage (server)", queue_kv_plot(server, summary.label))
    return plots


def queue_kv_plot(runs: list[dict[str, Any]], label: Callable[[Any], str]) -> bytes:
    """Running / waiting requests and KV-cache usage against time since the sweep's first scrape, per level."""
    fig = Figure(figsize=(7.5, 4.8))
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True)
    t0 = min(r["series"]["t"][0] for r in runs)
    colours = colormaps["viridis"]
    levels = sorted({r["level"] for r in runs})
    for r in runs:
        s, c = r["series"], colours(levels.index(r["level"]) / max(1, len(levels) - 1))
        t = [x - t0 for x in s["t"]]
        first = r["repeat"] == min(x["repeat"] for x in runs if x["level"] == r["level"])
        top.plot(t, s["num_requests_running"], color=c, label=label(r["level"]) if first else None)
        top.plot(t, s["num_requests_waiting"], color=c, linestyle=":")
        bottom.plot(t, [None if v is None else 100 * v for v in s["kv_cache_usage_perc"]], color=c)
    if all(v is None for r in runs for v in r["series"]["kv_cache_usage_perc"]):
        bottom.text(0.5, 0.5, "no KV-cache gauge from this server", ha="center", va="center",
                    transform=bottom.transAxes, color="#777")  # fmt: skip
    top.set_ylabel("requests\n(— running, ⋯ waiting)")
    top.legend(fontsize=7, ncol=4)
    bottom.set_ylabel("KV cache used %")
    bottom.set_xlabel("seconds since the sweep's first scrape")
    top.set_title("Server side: queue depth and KV usage (scraped /metrics)")
    fig.tight_layout()
    return _png(fig)
