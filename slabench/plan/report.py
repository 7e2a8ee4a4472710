"""A plan for people and programs: the console table (cheapest first), `plan.json`, and the TTFT-vs-replicas plot."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from slabench.plan.checks import Check
from slabench.plan.cost import FleetCost
from slabench.plan.search import ProfileAnswer
from slabench.sla.cost import ReplicaPrice

# 2: `cost` is the planned fleet's (the 90 % interval's pessimistic end, `planned_replicas`), not `replicas`'.
PLAN_SCHEMA_VERSION = 2


@dataclass
class Row:
    answer: ProfileAnswer
    price: ReplicaPrice | None
    cost: FleetCost | None

    @property
    def sort_key(self) -> tuple[int, float, float | str]:
        if self.cost is None:
            return (1, math.inf, self.answer.gpu.name)
        return (0, self.cost.per_1000_calls, self.cost.usd_per_hour)


@dataclass
class Plan:
    load: str
    contract: str
    checks: list[Check]
    balancer: str
    model: str
    model_description: str
    prices: str  # the price table's citation, region and date
    drain_timeout: float
    serving: str = "each GPU profile's own vLLM flags"  # slabench.plan.serving.describe
    rows: list[Row] = field(default_factory=list)
    seconds: float = 0.0

    def sorted_rows(self) -> list[Row]:
        return sorted(self.rows, key=lambda r: r.sort_key)

    @property
    def assumptions(self) -> list[str]:
        return [
            f"load: {self.load}",
            f"model profile: {self.model} ({self.model_description})",
            f"balancing: {self.balancer} across replicas, as an AWS ALB with "
            + ("`round_robin` (its default)" if self.balancer == "round-robin" else "`least_outstanding_requests`"),
            f"prices: {self.prices}; one replica = one GPU (or MIG slice) of the profile's first instance type",
            "cost: every replica is up before the load and paid from its first arrival until the last request ends",
            "replicas: N (90 %: a–b) — the model's count, and the counts if each step takes 1/f or f times as long "
            "(f: the profile's stated 90 % step-time uncertainty — a calibrated profile's widened as f^r where the "
            "requests in flight per replica lie r times beyond the users it saw — or --step-time-factor); the plan "
            "picks b, the "
            "interval's pessimistic end, and its figures, margin and cost are b's at that end",
            f"engine: the simulator's vLLM capacity model (slabench/sim) with {self.serving} (vLLM's defaults per card "
            "where unset, prefix caching on); GPU figures are approximate public ones (docs/simulator.md)",
            f"a request not finished {self.drain_timeout:g} s after the last arrival is incomplete and counts as an "
            "infinite TTFT/E2E",
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "slabench.plan",
            "schema_version": PLAN_SCHEMA_VERSION,
            "load": self.load,
            "contract": self.contract,
            "checks": [{"check": c.name, "max": c.target, "severity": c.severity} for c in self.checks],
            "balancer": self.balancer,
            "model": self.model,
            "assumptions": self.assumptions,
            "seconds": round(self.seconds, 2),
            "profiles": [_row_dict(r) for r in self.sorted_rows()],
        }


def _row_dict(r: Row) -> dict[str, Any]:
    a = r.answer
    out: dict[str, Any] = {
        "gpu": a.gpu.name,
        "gpu_description": a.gpu.description,
        "engine": a.engine,
        "replicas": a.replicas,
        "replicas_90": {"low": a.optimistic, "high": a.pessimistic} if a.replicas is not None else None,
        "planned_replicas": a.pessimistic,
        "step_time_factor_90": a.factor,
        "in_flight_per_replica": a.level,
        "levels_seen": list(a.gpu.uncertainty.levels) if a.gpu.uncertainty.levels else None,
        "uncertainty_source": a.gpu.uncertainty.source,
        "problem": a.problem or (a.pessimistic_problem and f"at the pessimistic end: {a.pessimistic_problem}"),
        "first_guess": a.first_guess,
        "search_seconds": round(a.seconds, 2),
    }
    if r.price is not None:
        out["price"] = {
            "instance_type": r.price.instance_type,
            "per_replica_usd_per_hour": r.price.per_replica_usd_per_hour,
            "arithmetic": r.price.arithmetic(),
            "source": r.price.price_source,
        }
    if r.cost is not None:
        out["cost"] = {
            "usd_per_hour": r.cost.usd_per_hour,
            "usd_for_load": r.cost.usd_for_load,
            "per_million_output_tokens_usd": r.cost.per_million_output_tokens,
            "per_1000_calls_usd": r.cost.per_1000_calls,
            "hours_paid": r.cost.hours,
        }
    if a.answer is not None:
        b = a.binding
        out["answer"] = a.answer.to_dict()
        out["binding_check"] = b.check.name if b else None
        out["margin"] = b.margin if b else None
    if a.below is not None:
        out["one_fewer"] = a.below.to_dict()
    if a.planned is not None:
        pb = a.planned_binding
        out["planned"] = a.planned.to_dict()
        out["planned_binding_check"] = pb.check.name if pb else None
        out["planned_margin"] = pb.margin if pb else None
        out["figures_90"] = {  # at the planned count: the model's figure and the interval's ends
            k: {e: p.figures.get(k) for e, p in a.at_planned.items()} for k in a.planned.prediction.figures
        }
    out["probes"] = [p.to_dict() for p in a.probes]
    return out


def _s(x: float | None, unit: str = "s") -> str:
    if x is None:
        return "—"
    if math.isinf(x):
        return "∞"
    return f"{x:,.2f} {unit}" if unit else f"{x:,.2f}"


def _usd(x: float) -> str:
    return "∞" if math.isinf(x) else (f"${x:,.2f}" if x >= 10 else f"${x:,.3f}")


class PlanView:
    """The console view: one row per GPU profile, cheapest first, then checks, notes and assumptions. Narrower than
    120 columns (a CI log is 80) the row stacks: GPU over instance, $/1M over $/1k, drain over TTFT, the margin over
    its check, so no name or figure is cut."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        plan = self.plan
        yield self._narrow() if options.max_width < 120 else self._wide()
        yield Text(f"checks: {', '.join(f'{c.name} ≤ {c.target:g}' for c in plan.checks)}")
        yield Text(
            "planned: the fewest replicas meeting every check at the 90 % interval's pessimistic end (each step "
            "taking the profile's uncertainty factor longer); cost, drain, TTFT and margin are for that fleet there"
        )
        for row in plan.sorted_rows():
            a = row.answer
            if a.answer is None or row.cost is None:
                why = a.problem or f"at the 90 % interval's pessimistic end: {a.pessimistic_problem}"
                yield Text(f"note: {a.gpu.name}: {why}", style="yellow")
        for assumption in plan.assumptions:
            yield Text(f"assumption: {assumption}")

    def _cells(self) -> list[tuple[str, str, str, Text, str, str, str, str, str, str, str]]:
        """Per row: GPU, instance, replicas (90 %), planned, $/h, $/1M out, $/1k calls, drain, TTFT p95, margin,
        binding check — the last six for the planned fleet at the pessimistic end."""
        out: list[tuple[str, str, str, Text, str, str, str, str, str, str, str]] = []
        for r in self.plan.sorted_rows():
            a = r.answer
            itype = r.price.instance_type + (f" ({a.gpu.mig_profile})" if a.gpu.mig_profile else "") if r.price else "—"
            interval = a.replicas_text() if a.answer is not None else "—"
            if a.planned is None or r.cost is None:
                out.append((a.gpu.name, itype, interval, Text("none", style="bold red"), *(("—",) * 7)))
                continue
            p = a.planned.prediction
            b = a.planned_binding
            margin, check = (f"{b.margin:.2%}", b.check.name) if b and b.margin is not None else ("—", "")
            out.append((
                a.gpu.name, itype, interval, Text(f"{a.pessimistic}", style="bold"), _usd(r.cost.usd_per_hour),
                _usd(r.cost.per_million_output_tokens), _usd(r.cost.per_1000_calls), _s(p.drain_s),
                _s(p.figures.get("ttft_p95")), margin, check,
            ))  # fmt: skip
        return out

    def _title(self) -> str:
        return (
            f"slabench plan — {self.plan.contract}: fewest replicas meeting every latency check at the 90 % "
            "interval's pessimistic end, cheapest first"
        )

    def _wide(self) -> Table:
        t = Table(title=self._title())
        heads = (
            "GPU profile",
            "instance",
            "replicas (90 %)",
            "planned",
            "$/h",
            "$/1M out tok",
            "$/1k calls",
            "drain",
            "TTFT p95",
            "margin",
        )
        for h in heads:
            t.add_column(h, justify="left" if h in ("GPU profile", "instance", "margin") else "right", no_wrap=True)
        for gpu, itype, iv, n, usd_h, per_m, per_k, drain, ttft, margin, check in self._cells():
            t.add_row(gpu, itype, iv, n, usd_h, per_m, per_k, drain, ttft, f"{margin} ({check})" if check else margin)
        return t

    def _narrow(self) -> Table:
        t = Table(title=self._title(), box=box.SIMPLE_HEAD, title_justify="left", show_edge=False, padding=(0, 1, 0, 0))
        heads = (
            "GPU profile\ninstance",
            "replicas\nplanned",
            "$/h\n$/1M out\n$/1k calls",
            "drain\nTTFT p95",
            "margin\ncheck",
        )
        for h in heads:
            t.add_column(h, justify="left" if h in (heads[0], heads[-1]) else "right", no_wrap=True)
        for gpu, itype, iv, n, usd_h, per_m, per_k, drain, ttft, margin, check in self._cells():
            t.add_row(
                f"{gpu}\n{itype}", Text(f"{iv}\n").append(n), f"{usd_h}\n{per_m}\n{per_k}", f"{drain}\n{ttft}",
                f"{margin}\n{check}",
            )  # fmt: skip
        return t


def table(plan: Plan) -> PlanView:
    return PlanView(plan)


def plot_png(plan: Plan) -> bytes:
    """Predicted TTFT p95 against replicas, one line per profile; fleets stopped early (a check already failed) as
    triangles at the top, the TTFT target as a dashed line. Needs the `report` extra (matplotlib)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import ScalarFormatter

    fig = Figure(figsize=(7.6, 4.4), dpi=110, layout="constrained")
    ax = fig.add_subplot()
    ttft = next((c for c in plan.checks if c.metric == "ttft_p95"), None)
    finite = [
        v
        for r in plan.rows
        for p in r.answer.probes
        if p.prediction.complete and (v := p.prediction.figures.get("ttft_p95")) is not None and v != math.inf
    ]
    top = max(finite + ([ttft.target] if ttft else [])) * 3 if finite else 10.0
    for k, r in enumerate(plan.sorted_rows()):
        probes = r.answer.probes
        if not probes:
            continue
        done = [
            (p.replicas, v)
            for p in probes
            if p.prediction.complete and (v := p.prediction.figures.get("ttft_p95")) is not None
        ]
        xs = [x for x, _ in done]
        ys = [min(v, top) for _, v in done]
        (line,) = ax.plot(xs, ys, "o-", ms=4, lw=1.5, label=f"{r.answer.gpu.name}")
        stopped = [p.replicas for p in probes if not p.prediction.complete]
        if stopped:
            ax.scatter(stopped, [top] * len(stopped), marker="^", color=line.get_color(), s=30, zorder=4)
        planned = {e: pr.figures.get("ttft_p95") for e, pr in r.answer.at_planned.items()}
        if r.answer.pessimistic is not None and all(v is not None and math.isfinite(v) for v in planned.values()):
            lo, mid, hi = (min(float(planned[e] or 0), top) for e in ("optimistic", "model", "pessimistic"))
            ax.errorbar(  # the planned fleet: its TTFT p95 by the model, and the interval's ends
                [r.answer.pessimistic], [mid], yerr=[[mid - lo], [hi - mid]], fmt="s", ms=5, capsize=3,
                color=line.get_color(), zorder=5,
            )  # fmt: skip
        if r.answer.replicas is not None:
            ax.axvline(r.answer.replicas, color=line.get_color(), lw=0.8, ls=":")
            ax.annotate(
                str(r.answer.replicas),
                (r.answer.replicas, top),
                color=line.get_color(),
                fontsize=8,
                xytext=(2, -12 - 11 * k),
                textcoords="offset points",
            )
    if ttft:
        ax.axhline(ttft.target, color="0.3", ls="--", lw=1, label=f"target {ttft.target:g} s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # plain numbers, not 10^x
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(ScalarFormatter())
    ax.tick_params(axis="both", which="minor", labelsize=7)
    ax.set_xlabel("replicas")
    ax.set_ylabel("predicted TTFT p95 (s)")
    ax.set_title(
        "TTFT p95 vs replicas (▲: stopped early; dotted: the model's answer; ■: the planned fleet, its 90 % interval)",
        fontsize=9,
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    buf = io.BytesIO()
    FigureCanvasAgg(fig).print_png(buf)  # type: ignore[no-untyped-call]  # the Agg backend is not annotated
    return buf.getvalue()
