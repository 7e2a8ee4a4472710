"""The sweep report: summary.json, report.md, a self-contained report.html (PNG plots embedded), plots/*.png and a
rich console table — all from one `SweepSummary`.

The Markdown and HTML are rendered from the same list of blocks (paragraphs, tables, images), so they say the same
thing. Every figure is labelled with its view: *across repeats* (mean ± std [95 % CI] of the per-run values) or
*pooled* (all requests of the level together). A dagger (†) marks a figure resting on too few requests.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from slabench.analysis.aggregate import METHOD
from slabench.analysis.summary import Estimate, SweepSummary, summary_json
from slabench.core.extras import missing
from slabench.evidence.run_status import MeasurementPolicy, saturation_reasons

LOW = "†"
# (metric key, column title, unit): unit "ms" shows seconds as milliseconds, "%" shows a ratio as a percentage.
HEADLINE = [
    ("ttft_p95", "TTFT p95", "ms"),
    ("ttft_answer_p95", "TTFAT p95", "ms"),  # to the first answer token: after a reasoning model's reasoning
    ("itl_p95", "ITL p95", "ms"),
    ("tpot_p50", "TPOT p50", "ms"),
    ("e2e_p95", "E2E p95", "ms"),
    ("throughput_rps", "req/s", ""),
    ("output_tokens_per_s", "out tok/s", ""),
    ("error_rate", "errors", "%"),
    ("goodput_rps", "goodput/s", ""),
]


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "ms":
        v = value * 1000
        return f"{v:.1f}" if abs(v) < 1000 else f"{v:,.0f}"
    if unit == "%":
        return f"{value * 100:.2f}%"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def unit_of(key: str) -> str:
    if key.endswith(("_rate", "_ratio")) or key.startswith("quality."):
        return "%"
    if key.split("_")[0] in ("ttft", "itl", "tpot", "e2e"):
        return "ms"
    return ""


def across(e: Estimate | None, unit: str) -> str:
    """'mean ± std' and on a second line '[ci_low, ci_high]' (or 'mean (n=1, no CI)'), † when low on samples."""
    if e is None or e.mean is None:
        return "–"
    mark = f" {LOW}" if e.low_samples else ""
    if e.std is None:
        return f"{fmt(e.mean, unit)} (n=1, no CI){mark}"
    if e.too_wide:
        return f"{fmt(e.mean, unit)} ± {fmt(e.std, unit)}{mark}\n[CI too wide]"
    return f"{fmt(e.mean, unit)} ± {fmt(e.std, unit)}{mark}\n[{fmt(e.ci95_low, unit)}, {fmt(e.ci95_high, unit)}]"


# -- blocks ------------------------------------------------------------------------------------------------------
@dataclass
class Para:
    text: str


@dataclass
class Tab:
    header: list[str] | None  # None: a key/value table without a header row
    rows: list[list[str]]


@dataclass
class Img:
    title: str
    name: str  # file stem under plots/
    png: bytes


Block = Para | Tab | Img


@dataclass
class Section:
    title: str
    blocks: list[Block]


def _title(s: SweepSummary) -> str:
    sid = (s.sweep or {}).get("sweep_id") or Path(s.source).name
    return f"slabench sweep report — {sid}"


def _overview(s: SweepSummary) -> list[Block]:
    sw = s.sweep or {}
    cfg = sw.get("config") or {}
    rows = [["source", s.source], ["generated", s.generated_at], ["summary schema", str(s.schema_version)]]
    if sw:
        rows += [
            ["target", sw.get("target_url") or "embedded simulator"],
            ["locustfile", str(cfg.get("locustfile", "–"))],
            ["levels × repeats", f"{cfg.get('levels')} × {cfg.get('repeats')}"],
            ["per run", _per_run(cfg.get("run", {}))],
            ["warm-up excluded", f"first {cfg.get('run', {}).get('warmup_s', 0)} s of each run"],
            ["git revision", str(sw.get("git_revision") or "–")],
            ["host", _host(sw.get("host") or {})],
        ]
    if s.slo:
        rows.append(["goodput SLOs", ", ".join(f"{k} ≤ {v}" for k, v in s.slo.items())])
    return [Tab(None, rows)]


def _per_run(run: dict[str, Any]) -> str:
    if run.get("duration_s"):
        return f"{run['duration_s']:g} s"
    return f"{run.get('requests')} requests" if run.get("requests") else "–"


def _host(h: dict[str, Any]) -> str:
    return f"{h.get('hostname', '?')} ({h.get('platform', '?')}, {h.get('cpus', '?')} CPUs)" if h else "–"


def _cliff(s: SweepSummary) -> list[Block]:
    c = s.cliff
    blocks: list[Block] = [Para(f"**{c.get('status', 'none')}** — {c.get('message', '')}")]
    rows = []
    for part in ("latency", "throughput"):
        p = c.get(part) or {}
        for cand in p.get("candidates", []):
            unit = unit_of(p["metric"])
            prev, at = cand["previous"], cand["at"]
            rows.append(
                [
                    part,
                    p["metric"],
                    f"{prev['level']} → {at['level']}",
                    f"{fmt(prev['mean'], unit)} [{fmt(prev['ci95_low'], unit)}, {fmt(prev['ci95_high'], unit)}]",
                    f"{fmt(at['mean'], unit)} [{fmt(at['ci95_low'], unit)}, {fmt(at['ci95_high'], unit)}]",
                    "called" if cand["called"] else "not called",
                    cand["why"],
                ]
            )
    if rows:
        blocks.append(Tab(["check", "metric", "levels", "before (mean [CI])", "at (mean [CI])", "", "why"], rows))
    o = c.get("options", {})
    blocks.append(
        Para(
            f"Method: latency ({o.get('latency_metric')}) is a candidate when its mean reaches "
            f"{o.get('latency_ratio')}× its low-load trend (the line through the two lowest levels); "
            f"throughput ({o.get('throughput_metric')}) when it gains "
            f"less than {o.get('scaling_floor')} of linear scaling. A candidate is called only when the 95% intervals "
            "of the neighbouring levels do not overlap (see docs/analysis.md)."
        )
    )
    return blocks


def _headline(s: SweepSummary, pooled: bool) -> Tab:
    cols = [(k, t, u) for k, t, u in HEADLINE if any(k in lv.metrics for lv in s.levels)]
    rows = []
    for lv in s.levels:
        cells = [f"{lv.level:g}", str(lv.n_runs), str(lv.requests)]
        for k, _, u in cols:
            e = lv.metrics.get(k)
            if pooled:
                cells.append("–" if e is None else fmt(e.pooled, u) + (f" {LOW}" if e.low_samples else ""))
            else:
                cells.append(across(e, u))
        rows.append(cells)
    return Tab([f"level ({s.level_unit})", "runs", "requests"] + [f"{t} ({u})" if u else t for _, t, u in cols], rows)


def _errors(s: SweepSummary) -> list[Block]:
    cats = sorted({k for lv in s.levels for k in lv.error_counts})
    if not cats:
        return [Para("No failed, incomplete or dropped requests.")]
    rows = [[f"{lv.level:g}"] + [str(lv.error_counts.get(c, 0)) for c in cats] for lv in s.levels]
    return [
        Para(
            "Counted requests (after warm-up) by error category, all runs of the level; `cancelled` requests were "
            "cut by the end of a run and are ours, not the server's (left out of the error rate)."
        ),
        Tab([f"level ({s.level_unit})", *cats], rows),
    ]


def _all_figures(s: SweepSummary) -> list[Block]:
    blocks: list[Block] = []
    for lv in s.levels:
        rows = []
        for k, e in lv.metrics.items():
            u = unit_of(k)
            ci = "–" if e.ci95_low is None else f"[{fmt(e.ci95_low, u)}, {fmt(e.ci95_high, u)}]"
            rows.append(
                [
                    k + (f" ({u})" if u else ""),
                    fmt(e.mean, u),
                    fmt(e.std, u),
                    str(e.n),
                    ci,
                    "–" if e.cv is None else f"{e.cv:.3f}",
                    fmt(e.pooled, u),
                    str(e.samples),
                    LOW if e.low_samples else "",
                ]
            )
        blocks.append(
            Para(
                f"**Level {s.label(lv.level)}** — {lv.n_runs} run(s), {lv.requests} counted requests, "
                f"{fmt(lv.duration_s, '')} s measured"
            )
        )
        blocks.append(Tab(["metric", "mean", "std", "n", "95% CI", "CV", "pooled", "samples", LOW], rows))
    return blocks


def _runs(s: SweepSummary) -> Tab:
    rows = []
    for lv in s.levels:
        for r in lv.runs:
            rows.append(
                [
                    f"{lv.level:g}",
                    str(r.repeat),
                    r.run_id or "–",
                    str(r.records),
                    f"{r.excluded_warmup} ({r.warmup_rule})",
                    str(r.counted),
                    fmt(r.duration_s, ""),
                    fmt(r.metrics.get("ttft_p95"), "ms"),
                    fmt(r.metrics.get("throughput_rps"), ""),
                    ", ".join(f"{k} {v}" for k, v in r.error_counts.items()) or "–",
                ]
            )
    return Tab(
        [
            f"level ({s.level_unit})",
            "repeat",
            "run id",
            "records",
            "warm-up excluded",
            "counted",
            "window s",
            "TTFT p95 ms",
            "req/s",
            "not OK",
        ],
        rows,
    )


def _plots(plots: dict[str, tuple[str, bytes]], no_plots: str | None) -> list[Block]:
    if no_plots is not None:
        return [Para(f"No plots: matplotlib is not installed ({no_plots}); every figure is in the tables.")]
    return [Img(t, n, png) for n, (t, png) in plots.items() if n != "server_queue_kv"]


def _server(runs: list[dict[str, Any]], plots: dict[str, tuple[str, bytes]]) -> list[Block]:
    """The server's side (issue: harness and server must visibly agree); empty when nothing was scraped."""
    from slabench.analysis.server_side import CROSSCHECK_HEADER, crosscheck_rows

    if not runs:
        return [Para("No server metrics were scraped (the target has no /metrics, or scraping was off).")]
    blocks: list[Block] = []
    if "server_queue_kv" in plots:
        title, png = plots["server_queue_kv"]
        blocks.append(Img(title, "server_queue_kv", png))
    blocks += [
        Para(
            "Client-measured means against the server's own histograms over the same window, and the client's "
            "token sums against the server's counters. A client figure at or above the server's is expected (it "
            "adds the network and the harness); `agree` applies the tolerance in docs/live.md."
        ),
        Tab(CROSSCHECK_HEADER, crosscheck_rows(runs)),
    ]
    return blocks


def build(
    s: SweepSummary,
    plots: dict[str, tuple[str, bytes]],
    server: list[dict[str, Any]] | None = None,
    verdict: Section | None = None,
    no_plots: str | None = None,
) -> list[Section]:
    """The report's sections. `verdict`: the SLA verdict, rendered by the grader's side (this layer does not
    import it), shown right after the overview. `no_plots`: how to install the plotting extra, when it is missing."""
    sections = [
        Section("Overview", _overview(s)),
        *([verdict] if verdict is not None else []),
        Section("Scaling cliff", _cliff(s)),
        Section(
            "Per level, across repeats",
            [
                Para(
                    f"Each cell: mean ± std [95% CI] over the runs of the level (Student t; n=1 has no CI). "
                    f"{LOW} = some run's figure rests on too few requests (p99 needs 100)."
                ),
                _headline(s, pooled=False),
            ],
        ),
        Section("Per level, pooled", [Para("All counted requests of the level together."), _headline(s, True)]),
        Section("Plots", _plots(plots, no_plots)),
        Section("Server side", _server(server or [], plots)),
        Section("Errors", _errors(s)),
        Section("All figures", _all_figures(s)),
        Section("Runs", [_runs(s)]),
        Section("Method", [Para(f"**{k}**: {v}") for k, v in METHOD.items()]),
    ]
    if s.warnings:
        sections.insert(1, Section("Warnings", [Para(w) for w in s.warnings]))
    flagged = incomplete_runs(s)
    if flagged:
        why = (
            "These runs did not measure what they claim (saturation judged by the default measurement policy; an "
            "SLA contract may set its own): no verdict on them can PASS, and grading exits 4."
        )
        sections.insert(1, Section("Measurement incomplete", [Para(why), *[Para(w) for w in flagged]]))
    return sections


def incomplete_runs(s: SweepSummary) -> list[str]:
    """Why runs of the sweep cannot stand for their load: the facts, and saturation under the default policy."""
    policy = MeasurementPolicy()
    return [
        *s.incomplete,
        *(f"{where}: {why}" for where, sat in s.saturation for why in saturation_reasons(sat, policy)),
    ]


# -- rendering ---------------------------------------------------------------------------------------------------
def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(title: str, sections: list[Section]) -> str:
    out = [f"# {title}", ""]
    for sec in sections:
        out += [f"## {sec.title}", ""]
        for b in sec.blocks:
            if isinstance(b, Para):
                out += [b.text, ""]
            elif isinstance(b, Tab):
                header = b.header or [""] * len(b.rows[0])
                out.append("| " + " | ".join(_md_cell(h) for h in header) + " |")
                out.append("|" + "---|" * len(header))
                out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
                out.append("")
            elif isinstance(b, Img):
                out += [f"![{b.title}](plots/{b.name}.png)", ""]
    return "\n".join(out)


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:2rem auto;max-width:1400px;
color:#1d1d1f;padding:0 1rem;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.25rem;border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;margin:.6rem 0 1rem;font-size:.85rem}
th,td{border:1px solid #d0d0d0;padding:.25rem .5rem;text-align:right;white-space:nowrap}
th{background:#f2f2f5}td:first-child,th:first-child{text-align:left}
figure{display:inline-block;margin:.4rem}figure img{max-width:560px;border:1px solid #e5e5e5}
figcaption{font-size:.85rem;color:#555;text-align:center}.scroll{overflow-x:auto}
.ci{color:#666;font-size:.78rem}
"""


def _inline(text: str) -> str:
    """Escape, then render **bold** and `code` (the only markup the blocks use)."""
    t = html.escape(text)
    parts = t.split("**")
    t = "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(parts))
    parts = t.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _cell(text: str) -> str:
    """A table cell; a second line (the interval) is shown smaller under the first."""
    first, _, rest = text.partition("\n")
    return html.escape(first) + (f'<br><span class="ci">{html.escape(rest)}</span>' if rest else "")


def to_html(title: str, sections: list[Section]) -> str:
    out = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    for sec in sections:
        out.append(f"<h2>{html.escape(sec.title)}</h2>")
        for b in sec.blocks:
            if isinstance(b, Para):
                out.append(f"<p>{_inline(b.text)}</p>")
            elif isinstance(b, Tab):
                head = "".join(f"<th>{html.escape(h)}</th>" for h in b.header) if b.header else ""
                thead = f"<thead><tr>{head}</tr></thead>" if head else ""
                body = "".join("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in row) + "</tr>" for row in b.rows)
                out.append(f'<div class="scroll"><table>{thead}<tbody>{body}</tbody></table></div>')
            elif isinstance(b, Img):
                data = base64.b64encode(b.png).decode()
                out.append(
                    f'<figure><img alt="{html.escape(b.title)}" src="data:image/png;base64,{data}">'
                    f"<figcaption>{html.escape(b.title)}</figcaption></figure>"
                )
    out.append("</body></html>")
    return "\n".join(out)


def write_report(summary: SweepSummary, out_dir: str | Path, verdict: Section | None = None) -> dict[str, Path]:
    """Write summary.json, report.md, report.html and plots/*.png into `out_dir`; return their paths."""
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    from slabench.analysis.server_side import collect

    server = collect(summary)
    no_plots = missing("matplotlib")
    if no_plots is None:
        from slabench.analysis.plots import render_all

        plots = render_all(summary, server)
    else:
        plots = {}
    paths = {"summary": out / "summary.json", "markdown": out / "report.md", "html": out / "report.html"}
    for name, (_, png) in plots.items():
        p = out / "plots" / f"{name}.png"
        p.write_bytes(png)
        paths[f"plot:{name}"] = p
    sections = build(summary, plots, server, verdict, no_plots)
    title = _title(summary)
    paths["summary"].write_text(summary_json(summary), encoding="utf-8")
    paths["markdown"].write_text(to_markdown(title, sections), encoding="utf-8")
    paths["html"].write_text(to_html(title, sections), encoding="utf-8")
    return paths


CONSOLE = ("ttft_p95", "itl_p95", "e2e_p95", "throughput_rps", "output_tokens_per_s", "error_rate", "goodput_rps")
NARROW = ("ttft_p95", "itl_p95", "throughput_rps", "error_rate")  # what fits 80 columns (a CI log)


def console_table(summary: SweepSummary, narrow: bool = False) -> Table:
    keys = NARROW if narrow else CONSOLE
    cols = [(k, t, u) for k, t, u in HEADLINE if k in keys and any(k in lv.metrics for lv in summary.levels)]
    title = "per level, across repeats: mean ± std [95% CI]"
    if narrow:  # a CI log: no side borders, one space between columns, no cell wrapped inside a figure
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 1, 0, 0))
    else:
        table = Table(title=title, title_justify="left")
    level = f"level ({summary.level_unit})"
    for name in (level, "runs", "requests") if not narrow else (level,):
        table.add_column(name, justify="right", no_wrap=narrow)
    for _, t, u in cols:
        table.add_column(f"{t} ({u})" if u else t, justify="right", no_wrap=narrow)
    for lv in summary.levels:
        cells = [across(lv.metrics.get(k), u) for k, _, u in cols]
        if narrow:  # three short lines per cell: mean, ± std, [interval]
            first = f"{lv.level:g}\n{lv.n_runs} × {lv.requests // max(lv.n_runs, 1)}"
            table.add_row(first, *[c.replace(" ± ", "\n± ") for c in cells])
        else:
            table.add_row(f"{lv.level:g}", str(lv.n_runs), str(lv.requests), *cells)
    return table


def print_console(summary: SweepSummary, console: Console | None = None) -> None:
    con = console or Console()
    con.print(console_table(summary, narrow=con.width < 120))  # a CI log (not a TTY) is 80 columns
    if any(e.low_samples for lv in summary.levels for e in lv.metrics.values()):
        con.print(f"{LOW} rests on too few requests (p99 needs 100; see report.md)")
    con.print(f"scaling cliff: {summary.cliff.get('status')} — {summary.cliff.get('message', '')}")
    for w in incomplete_runs(summary):
        con.print(f"[bold red]measurement incomplete[/]: {w}")
    for w in summary.warnings:
        con.print(f"[yellow]warning:[/] {w}")
