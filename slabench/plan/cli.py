"""`slabench plan`: which GPU meets the SLA under this load, with how many replicas, at what cost — without a GPU.

Replays a load (default: the dataset's 20,000-request / 195 s burst) through the simulator's vLLM capacity model of
each GPU profile, N replicas behind a load balancer, in virtual time; finds per profile the fewest replicas whose
predicted figures meet every latency check of the SLA contract; prints one table, cheapest first, and writes
`plan.json` and `plan.png` (predicted TTFT p95 vs replicas). Exit 0 when some profile meets the checks, 2 when none
does, 3 for bad input. Method and a worked example: docs/plan.md.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from slabench.core.errors import ExitCode, UserError
from slabench.core.extras import missing
from slabench.core.files import check_output
from slabench.core.queue import add_queue_file_options
from slabench.core.runcap import max_run_s
from slabench.core.textcols import add_documented_command
from slabench.plan.autoscale_cli import add_options as add_autoscale_options
from slabench.plan.checks import Check
from slabench.plan.jsondoc import finite as _finite
from slabench.plan.serving import add_options as add_serving_options
from slabench.plan.workload import LOADS, Mix, PlannedLoad, capped_load

DEFAULT_CONTRACT = Path(__file__).resolve().parents[2] / "sla" / "config_sla_example.yaml"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_documented_command(
        sub,
        "plan",
        "fewest replicas per GPU profile meeting the SLA's latency checks under a load, and their cost (no GPU)",
        __doc__,
    )
    p.add_argument("--sla", default=str(DEFAULT_CONTRACT), metavar="FILE", help="SLA contract (default: the example)")
    p.add_argument(
        "--profiles",
        default="",
        metavar="LIST",
        help="GPU profiles, comma-separated: built-in names or YAML paths (default: every built-in GPU profile)",
    )
    p.add_argument("--model", default="llama-3.1-8b-fp8", help="model profile: built-in name or YAML path")
    p.add_argument(
        "--balancer",
        choices=("round-robin", "least-outstanding"),
        default="round-robin",
        help="how the load balancer spreads requests (ALB: round_robin, the default, or least_outstanding_requests)",
    )
    g = p.add_argument_group("load")
    g.add_argument("--load", choices=LOADS, default=None, help="what to replay (default: burst, or queue with --queue)")
    g.add_argument("--queue", metavar="FILE", help="a queue file (CSV/JSONL with offset_s) or a public trace")
    add_queue_file_options(g, "--queue")
    g.add_argument("--dataset-dir", default="datasets", help="the workload dataset (burst/gamma queues, lengths)")
    g.add_argument("--task", choices=("verbose", "terse"), default="verbose", help="grading task (answer lengths)")
    g.add_argument("--rate-rps", type=float, help="rate: requests per second")
    g.add_argument("--duration", type=float, default=300.0, help="rate/steps: seconds of load (default 300)")
    g.add_argument("--burstiness", type=float, default=1.0, help="rate/diurnal: Gamma shape (1 = Poisson)")
    g.add_argument("--seed", type=int, default=0, help="rate/diurnal: arrival seed")
    g.add_argument(
        "--diurnal-peak-rps", type=float, default=10.0, help="diurnal (and --autoscale's day): the day's peak rate"
    )
    g.add_argument("--diurnal-day-minutes", type=float, default=24.0, help="diurnal: one day in this many minutes")
    g.add_argument("--diurnal-days", type=int, default=1, help="diurnal: days")
    g.add_argument("--users", type=int, help="steps: closed-loop users")
    add_serving_options(p)
    add_autoscale_options(p)
    s = p.add_argument_group("search")
    s.add_argument("--max-replicas", type=int, default=2000, help="give up above this many replicas (default 2000)")
    s.add_argument(
        "--drain-timeout",
        type=float,
        default=300.0,
        help="seconds after the last arrival a request may still finish (the open-loop shapes' default, 300)",
    )
    s.add_argument(
        "--price",
        action="append",
        default=[],
        metavar="PROFILE=USD",
        help="one replica's hourly cost for a profile, instead of the price table (repeatable)",
    )
    s.add_argument(
        "--step-time-factor",
        type=float,
        metavar="F",
        help="the 90 %% step-time interval (×1/F … ×F) for every profile instead of each one's stated uncertainty; "
        "1: plan at the model's count alone (one search per profile, a third of the time)",
    )
    s.add_argument("--jobs", type=int, default=0, help="profiles planned in parallel (default: 2, or fewer CPUs)")
    c = p.add_argument_group("compare with a measured search")
    c.add_argument(
        "--compare-search",
        metavar="SWEEP_DIR",
        help="instead of sizing a fleet: the highest concurrency one replica of each profile passes on the workload "
        "of this `slabench sweep --search` directory, beside the search's own answer",
    )
    o = p.add_argument_group("output")
    o.add_argument("--out", help="directory for plan.json and plan.png (default: runs/plan-<time>)")
    o.add_argument("--json", action="store_true", help="print plan.json to stdout instead of the table")
    p.set_defaults(func=run)


def _prices(items: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            usd = float(value)
        except ValueError:
            usd = -1.0
        if not sep or not name or not (math.isfinite(usd) and usd > 0):
            raise UserError(f"--price {item!r}: use PROFILE=USD_PER_REPLICA_HOUR, e.g. --price l4=0.80")
        out[name] = usd
    return out


def build_load(args: argparse.Namespace) -> PlannedLoad:
    from slabench.plan import workload as W

    kind = args.load or ("queue" if args.queue else "burst")
    if args.queue and kind != "queue":
        raise UserError(f"--queue FILE replays that file; drop --load {kind} (or use --load queue)")
    if kind == "queue" and not args.queue:
        raise UserError("--load queue needs --queue FILE (CSV/JSONL with an offset_s column)")
    if kind == "rate" and args.rate_rps is None:
        raise UserError("--load rate needs --rate-rps R (requests per second)")
    if kind == "steps" and args.users is None:
        raise UserError("--load steps needs --users N (closed-loop users)")
    jobs = args.jobs
    if kind in ("burst", "gamma"):
        return W.dataset_load(args.dataset_dir, kind, args.task, jobs)

    def burst_mix() -> Mix:
        return W.dataset_load(args.dataset_dir, "burst", args.task, jobs).mix

    if kind == "queue":
        return W.queue_file_load(
            args.queue,
            args.task,
            burst_mix,
            workers=jobs,
            fmt=args.queue_format,
            window=args.queue_window,
            block_tokens=args.queue_block_tokens,
        )
    if kind == "rate":
        return W.rate_load(burst_mix(), args.rate_rps, args.duration, args.burstiness, args.seed)
    if kind == "diurnal":
        return W.diurnal_load(
            burst_mix(), args.diurnal_peak_rps, args.diurnal_day_minutes, args.diurnal_days, args.burstiness, args.seed
        )
    return W.steps_load(burst_mix(), args.users, args.duration)


def run(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console

    from slabench.core.config import validate_data
    from slabench.plan.autoscale import AutoscaleView
    from slabench.plan.autoscale_cli import search_scaling
    from slabench.plan.autoscale_cli import setup as autoscale_setup
    from slabench.plan.autoscale_cli import submit as submit_autoscale
    from slabench.plan.autoscale_cli import write as write_autoscale
    from slabench.plan.checks import latency_checks
    from slabench.plan.cost import FleetCost, profile_price
    from slabench.plan.report import Plan, Row, plot_png, table
    from slabench.plan.search import ProfileAnswer, ProfileJob, plan_profiles
    from slabench.plan.serving import describe, serving_flags
    from slabench.sim.profiles import EngineOptions, available_profiles, load_gpu_profile, load_model_profile
    from slabench.sla.contract import load_contract

    t0 = time.perf_counter()
    if args.max_replicas < 1:
        raise UserError(f"--max-replicas {args.max_replicas}: must be at least 1")
    if not (math.isfinite(args.drain_timeout) and args.drain_timeout > 0):
        raise UserError(f"--drain-timeout {args.drain_timeout:g}: must be > 0 seconds")
    if args.step_time_factor is not None and not (
        math.isfinite(args.step_time_factor) and 1 <= args.step_time_factor <= 10
    ):
        raise UserError(f"--step-time-factor {args.step_time_factor:g}: must be from 1 (no interval) to 10")
    if args.jobs < 0:
        raise UserError(f"--jobs {args.jobs}: must be 0 (the default: 2, or fewer CPUs) or more")
    args.jobs = args.jobs or max(1, min(2, os.cpu_count() or 1))
    loaded = load_contract(args.sla)
    checks = latency_checks(loaded)
    refs = [r.strip() for r in args.profiles.split(",") if r.strip()] or available_profiles("gpu")
    gpus = [load_gpu_profile(r) for r in refs]  # unknown names and bad files fail here, before any work
    model = load_model_profile(args.model)
    prices = _prices(args.price)
    unknown = set(prices) - {g.name for g in gpus}
    if unknown:
        raise UserError(f"--price {', '.join(sorted(unknown))}: not among the planned profiles ({', '.join(refs)})")
    serving = serving_flags(args)
    validate_data(serving, EngineOptions, "serving flags")  # a bad flag is one line here, not a row per profile
    if args.compare_search:
        return compare_search(args, loaded, refs, serving)
    replica_prices = {g.name: profile_price(g, loaded, prices.get(g.name)) for g in gpus}
    scaling = autoscale_setup(args, serving, [g.name for g in gpus])
    if args.queue:
        from slabench.plan.workload import read_queue

        read_queue(args.queue, args.queue_format, args.queue_window, args.queue_block_tokens)  # fails before any work
    load = capped_load(build_load(args), max_run_s())
    out = Path(args.out) if args.out else Path("runs") / time.strftime("plan-%Y%m%d-%H%M%S")
    check_output(out, "--out", is_dir=True)  # before minutes of planning

    order = sorted(range(len(refs)), key=lambda i: -_expected_work(refs[i], args.model, load, checks, serving))
    jobs = [
        ProfileJob(refs[i], args.model, load, checks, args.balancer, args.drain_timeout, args.max_replicas, serving,
                   args.step_time_factor, search_scaling(scaling, args.balancer))
        for i in order
    ]  # fmt: skip
    with ProcessPoolExecutor(min(args.jobs, len(refs))) as pool:  # the biggest fleets first: they take longest
        scaled: dict[int, Future[Any]] = {}  # each profile's autoscaled replay, started as soon as its plan is known

        def planned(j: int, answer: ProfileAnswer) -> None:
            if scaling is not None:
                i = order[j]
                usd = replica_prices[gpus[i].name].per_replica_usd_per_hour
                run = submit_autoscale(pool, scaling, jobs[j], answer, usd)
                if run is not None:
                    scaled[i] = run

        by_work = plan_profiles(pool, jobs, planned)
        answers = [by_work[order.index(i)] for i in range(len(refs))]
        scaled_answers = [scaled[i].result() for i in sorted(scaled)]

    plan = Plan(
        load=load.description,
        contract=f"{loaded.contract.name} ({loaded.path})",
        checks=checks,
        balancer=args.balancer,
        model=model.name,
        model_description=model.description,
        prices=f"{loaded.prices.citation()}, region {loaded.region}"
        + (f"; --price for {', '.join(sorted(prices))}" if prices else ""),
        drain_timeout=args.drain_timeout,
        serving=describe(serving),
    )
    for a in answers:
        price = replica_prices[a.gpu.name]
        cost = None
        if a.planned is not None and a.pessimistic is not None:  # priced as planned: the pessimistic end's fleet
            p = a.planned.prediction
            cost = FleetCost(price.per_replica_usd_per_hour, a.pessimistic, p.drain_s / 3600.0, p.output_tokens, p.ok)
        plan.rows.append(Row(a, price, cost))
    plan.seconds = time.perf_counter() - t0

    doc = _finite(plan.to_dict())
    (out / "plan.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    written = [out / "plan.json"]
    no_plot = missing("matplotlib")
    if no_plot is None:
        (out / "plan.png").write_bytes(plot_png(plan))
        written.append(out / "plan.png")
    scaled_view = None
    if scaling is not None:
        written += write_autoscale(scaling, scaled_answers, checks, out)
        scaled_view = AutoscaleView(scaled_answers, scaling.rule, scaling.peak_rps)
    if args.json:
        print(json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False))
    else:
        console = Console()
        console.print(table(plan))
        if scaled_view is not None:
            console.print(scaled_view)
        console.print(f"wrote {' and '.join(map(str, written))} ({plan.seconds:.1f} s)")
        if no_plot is not None:
            console.print(f"no plan.png: matplotlib is not installed ({no_plot})", markup=False)
    met = any(r.cost is not None for r in plan.rows)
    return ExitCode.PASS if met else ExitCode.FAIL


def _expected_work(gpu: str, model: str, load: PlannedLoad, checks: list[Check], serving: dict[str, Any]) -> int:
    from slabench.plan.search import PLAN_ENGINE, first_guess
    from slabench.sim.profiles import load_profile

    try:
        return first_guess(load_profile(gpu, model, engine={**serving, **PLAN_ENGINE}), load, checks)
    except UserError:
        return 0  # the model does not fit: answered at once


def compare_search(args: argparse.Namespace, loaded: Any, refs: list[str], serving: dict[str, Any]) -> int:
    """`--compare-search SWEEP_DIR`: per profile, the plan's highest passing concurrency beside the search's
    (`slabench.plan.versus_search`); writes compare.json. Exit 0: the comparison is a report, not a verdict."""
    import json

    from rich.console import Console

    from slabench.plan.checks import latency_checks
    from slabench.plan.search import PLAN_ENGINE
    from slabench.plan.versus_search import ComparisonView, compare, read_searched_sweep
    from slabench.sim.profiles import load_profile

    given = [flag for flag, v in (("--load", args.load), ("--queue", args.queue), ("--autoscale", args.autoscale)) if v]
    if given:
        raise UserError(f"--compare-search replays the search's own runs on one replica: drop {', '.join(given)}")
    searched = read_searched_sweep(args.compare_search)
    checks = [c for c in latency_checks(loaded) if c.kind != "incomplete_rate"]  # the checks the search bisects on
    out = Path(args.out) if args.out else Path(args.compare_search)
    check_output(out, "--out", is_dir=True)
    comparisons = []
    for ref in refs:
        config = load_profile(ref, args.model, engine={**serving, **PLAN_ENGINE})
        comparisons.append(compare(config, searched, checks, args.step_time_factor))
    doc = {
        "kind": "slabench.plan_vs_search",
        "schema_version": 1,
        "search": str(searched.path),
        "contract": str(loaded.path),
        "measured": {"highest_passing": searched.passed, "lowest_failing": searched.failed,
                     "range": [searched.low, searched.high], "tolerance": searched.tolerance},
        "plans": [c.to_dict() for c in comparisons],
    }  # fmt: skip
    (out / "compare.json").write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    if args.json:
        print(json.dumps(doc, indent=2, ensure_ascii=False))
        return ExitCode.PASS
    console = Console()
    console.print(ComparisonView(searched, loaded.contract.name, comparisons))
    console.print(f"wrote {out / 'compare.json'}")
    return ExitCode.PASS
