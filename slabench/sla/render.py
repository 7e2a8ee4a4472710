"""A verdict for people: a rich table for the console, Markdown for the report, plain lines for logs. No I/O."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from slabench.analysis.report import Block, Para, Section, Tab
from slabench.sla.grade import CheckResult, Status, Verdict, fmt

STYLE = {Status.PASS: "bold green", Status.CONDITIONAL: "bold yellow", Status.FAIL: "bold red"}


def _target(c: CheckResult) -> str:
    op = "≤" if c.direction == "max" else "≥"
    band = f" (band {fmt(c.conditional_band, c.unit)})" if c.conditional_band else ""
    return f"{op} {fmt(c.target, c.unit)}{band}"


def _interval(c: CheckResult) -> str:
    if c.ci95_low is None or c.ci95_high is None:
        return "—"
    return f"{fmt(c.ci95_low, c.unit)} – {fmt(c.ci95_high, c.unit)}"


def _n(c: CheckResult) -> str:
    samples = f"{c.samples:,}" if c.samples is not None else "?"
    return "—" if c.no_data else f"{c.n} / {samples}"


def check_rows(v: Verdict) -> list[list[str]]:
    return [
        [c.check, str(c.status), fmt(c.observed, c.unit), _interval(c), _target(c), c.severity, _n(c), c.reason]
        for c in v.checks
    ]


HEADER = ["check", "verdict", "observed (mean)", "95% CI", "target", "severity", "runs / samples", "reason"]


class VerdictView:
    """The console view: headline, the check table, each check's reason, cost arithmetic, capacity, notes. The
    reasons sit under the table, not in it. Narrower than 120 columns (a CI log is 80), each check takes two lines
    of one column instead of a wide row, so no metric name is wrapped."""

    def __init__(self, v: Verdict) -> None:
        self.v = v

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        v = self.v
        yield Text(v.summary, style=STYLE[v.status])
        yield self._narrow() if options.max_width < 120 else self._wide()
        for c in v.checks:
            yield Text.assemble((f"{c.status} ", STYLE[c.status]), f"{c.check}: {c.reason}")
        for line in _detail_lines(v):
            yield Text(line)

    def _wide(self) -> Table:
        table = Table(title=f"SLA {self.v.contract} at {self.v.load} — {self.v.source}")
        for h in HEADER[:-1]:
            table.add_column(h, overflow="fold")
        for row, c in zip(check_rows(self.v), self.v.checks, strict=True):
            table.add_row(row[0], Text(row[1], style=STYLE[c.status]), *row[2:-1])
        return table

    def _narrow(self) -> Table:
        table = Table(title=f"SLA {self.v.contract} at {self.v.load}", box=box.SIMPLE_HEAD, title_justify="left")
        table.add_column("verdict", no_wrap=True)
        table.add_column("check\n  observed [95% CI]\n  target (severity; runs / samples)", no_wrap=True)
        for c in self.v.checks:  # one figure per line: a figure is never wrapped at its unit
            figure = f"{fmt(c.observed, c.unit)} [{_interval(c)}]"
            target = f"{_target(c)} ({c.severity}; {_n(c)})"
            table.add_row(Text(str(c.status), style=STYLE[c.status]), f"{c.check}\n  {figure}\n  {target}")
        return table


def verdict_table(v: Verdict) -> VerdictView:
    return VerdictView(v)


def _detail_lines(v: Verdict) -> list[str]:
    lines = [f"deployment: {v.deployment.arithmetic()}"]
    lines += [f"cost: {c.arithmetic}" for c in v.cost]
    cap = v.capacity
    if cap.highest_passing is not None:
        lines.append(f"capacity: highest level passing every check: {cap.highest_passing}")
    if cap.arithmetic:
        lines.append(f"capacity: {cap.arithmetic}")
    lines += [f"capacity: {n}" for n in cap.notes]
    if v.levels and len(v.levels) > 1:
        lines.append("levels: " + ", ".join(f"{lv} {s}" for lv, s in v.levels))
    lines += [f"note: {n}" for n in v.notes]
    return lines


def verdict_lines(v: Verdict) -> list[str]:
    """Plain text, one line each: for logs (the Locust hook)."""
    out = [v.summary]
    out += [f"  {c.status:<11} {c.check}: {c.reason}" for c in v.checks]
    out += [f"  {line}" for line in _detail_lines(v)]
    return out


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def verdict_markdown(v: Verdict) -> str:
    lines = [
        f"## SLA verdict: {v.status}",
        "",
        f"{v.summary}",
        "",
        f"Contract `{v.contract}` ({v.sla_file}), graded from `{v.source}`.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += ["| " + " | ".join(_md_cell(x) for x in row) + " |" for row in check_rows(v)]
    lines += ["", *[f"- {_md_cell(x)}" for x in _detail_lines(v)], ""]
    return "\n".join(lines)


class ComparisonView:
    """Several instance types graded with one contract: capacity and cost side by side. Narrower than 120 columns
    (a CI log is 80) the instance type sits over its verdict and the replicas over their $/h."""

    def __init__(self, verdicts: Sequence[Verdict]) -> None:
        self.verdicts = verdicts

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        narrow = options.max_width < 120
        t = Table(title="capacity per instance type graded", title_justify="left")
        heads: tuple[str, ...]
        if narrow:
            heads = (
                "instance type\nverdict",
                "highest passing\nlevel",
                "req/s per\nreplica",
                "replicas\n$/h",
                "$/M out",
            )
        else:
            heads = (
                "instance type",
                "verdict",
                "highest passing level",
                "req/s per replica",
                "replicas",
                "$/h",
                "$/M out",
            )
        for h in heads:
            t.add_column(h, no_wrap=True)
        for v in self.verdicts:
            cap = v.capacity
            per_m = next((c.estimate for c in v.cost if c.metric == "cost_per_million_output_tokens_usd"), None)
            status = Text(str(v.status), style=STYLE[v.status])
            rps = f"{cap.per_replica_rps:.4g}" if cap.per_replica_rps is not None else "—"  # (None: not sized)
            n = str(cap.replicas_needed) if cap.replicas_needed is not None else "—"
            usd = f"${cap.usd_per_hour:.4g}" if cap.usd_per_hour is not None else "—"
            per_million = fmt(per_m.mean if per_m else None, "USD")
            level = cap.highest_passing or "none"
            if narrow:
                t.add_row(
                    Text.assemble(v.deployment.instance_type, "\n", status), level, rps, f"{n}\n{usd}", per_million
                )
            else:
                t.add_row(v.deployment.instance_type, status, level, rps, n, usd, per_million)
        yield t


def comparison_table(verdicts: Sequence[Verdict]) -> ComparisonView:
    return ComparisonView(verdicts)


def verdict_section(v: Verdict) -> Section:
    """The verdict as a section of the sweep report: headline, the checks with their reasons, cost and capacity."""
    blocks: list[Block] = [Para(f"**{v.status}** — {v.summary}"), Tab(HEADER, check_rows(v))]
    blocks += [Para(line) for line in _detail_lines(v)]
    return Section(f"SLA verdict: {v.status} ({v.contract})", blocks)
