"""`slabench sweep` (run a sweep YAML) and `slabench aggregate RUN_DIR` (figures, report, console table)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from slabench.core.api_key import api_key_from_env
from slabench.core.errors import UserError
from slabench.core.files import check_output
from slabench.core.run_id import SWEEP_ID_MAX_LENGTH, check_run_id

if TYPE_CHECKING:  # the commands import these lazily: `slabench --help` stays fast
    from slabench.analysis.summary import SweepSummary
    from slabench.sla.contract import LoadedContract
    from slabench.sla.grade import Verdict
    from slabench.sweep.config import Analysis, SweepConfig


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a load sweep: one locust run per (level, repeat), then aggregate and report",
        description="Run a sweep YAML (see sweeps/): one real `locust --headless` process per (level, repeat), "
        "records under runs/<sweep-id>/<level>/<repeat>/, then summary.json, report.html/.md and a console table.",
    )
    p.add_argument("--config", required=True, help="sweep YAML, e.g. sweeps/default.yaml")
    p.add_argument(
        "--resume",
        nargs="?",
        const="latest",
        metavar="SWEEP_DIR",
        help="continue an interrupted sweep, skipping complete runs (default: the newest unfinished one of this name)",
    )
    p.add_argument("--sweep-id", help="name of the sweep directory (default: <name>-<UTC time>)")
    p.add_argument("--output-dir", help="parent of sweep directories (default: the YAML's output_dir, runs)")
    p.add_argument("--target-url", help="override target.url (an OpenAI-compatible base URL)")
    p.add_argument("--processes", type=int, help="override run.processes (locust --processes)")
    p.add_argument("--no-report", action="store_true", help="only run; aggregate later with `slabench aggregate`")
    p.add_argument(
        "--server-metrics",
        metavar="URL|pods|off",
        help="override where every run scrapes the server's metrics (locust --server-metrics): a URL, 'pods' / "
        "'pods:SELECTOR' for each serving pod's own in a cluster, or 'off'",
    )
    p.add_argument(
        "--search",
        action="store_true",
        help="find the highest concurrency whose latency and error checks (--sla) pass, by bisection between the "
        "config's lowest and highest level, instead of running every level",
    )
    p.add_argument(
        "--search-tolerance",
        type=int,
        default=1,
        metavar="USERS",
        help="stop when the bracket is this narrow (default 1: the exact level)",
    )
    p.add_argument(
        "--sla",
        help="grade the sweep against this SLA contract at the end (exit 0 PASS, 1 CONDITIONAL, "
        "2 FAIL, 3 invalid input)",
    )
    p.set_defaults(func=run_sweep)

    a = sub.add_parser(
        "aggregate",
        help="aggregate a sweep directory: per level mean ± std, 95%% CI, pooled view, cliff, report",
        description="Aggregate RUN_DIR (a `slabench sweep` directory, or a records file of a stepped shape) into "
        "summary.json, report.md, report.html and plots/, and print a table.",
    )
    a.add_argument("run_dir", metavar="RUN_DIR")
    a.add_argument("--out", help="where to write the report (default: RUN_DIR, or beside a records file)")
    a.add_argument("--warmup-s", type=float, help="leave out each run's first seconds (default: the run manifests')")
    a.add_argument(
        "--slo",
        action="append",
        default=[],
        metavar="KEY=SECONDS",
        help="per-request SLO for goodput (ttft_s, itl_s, tpot_s, e2e_s); repeatable (default: the sweep YAML's)",
    )
    a.add_argument("--require-ci", action="store_true", help="fail (exit 3) when a level has fewer than 2 repeats")
    a.add_argument("--json", action="store_true", help="print summary.json to stdout instead of the table")
    a.add_argument(
        "--sla", metavar="FILE", help="also grade against this SLA contract: the verdict goes into the report"
    )
    a.set_defaults(func=run_aggregate)


# -- sweep -------------------------------------------------------------------------------------------------------
def _apply_overrides(cfg: SweepConfig, args: argparse.Namespace) -> SweepConfig:
    if args.processes is not None:
        if args.processes < 1:
            raise UserError(f"--processes must be ≥ 1 (got {args.processes})")
        cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"processes": args.processes})})
    if args.target_url:
        from slabench.sweep.config import Target

        try:
            target = Target(url=args.target_url, api_key_env=cfg.target.api_key_env, insecure=cfg.target.insecure)
        except ValueError:
            raise UserError(f"--target-url {args.target_url}: must be an http:// or https:// URL") from None
        cfg = cfg.model_copy(update={"target": target})
    if args.output_dir:
        cfg = cfg.model_copy(update={"output_dir": args.output_dir})
    if getattr(args, "server_metrics", None):
        from slabench.evidence.scrape import check_option

        problem = check_option(args.server_metrics)
        if problem:
            raise UserError(problem)
        options = {**cfg.locust_options, "server-metrics": args.server_metrics}
        cfg = cfg.model_copy(update={"locust_options": options})
    return cfg


def _config_diff(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    keys = sorted(set(old) | set(new))
    return [k for k in keys if k != "analysis" and old.get(k) != new.get(k)]


def _resume_dir(cfg: SweepConfig, resume: str) -> Path:
    from slabench.core.schema import SWEEP
    from slabench.sweep.runner import read_json

    base = Path(cfg.output_dir)
    if resume != "latest":
        d = Path(resume)
        if not (d / "sweep.json").exists():
            raise UserError(f"--resume {d}: not a sweep directory (no sweep.json)")
        return d
    candidates = sorted(
        (d for d in base.glob(f"{cfg.name}-*") if (d / "sweep.json").exists()),
        key=lambda d: (d / "sweep.json").stat().st_mtime,
    )
    unfinished = [d for d in candidates if (read_json(d / "sweep.json", SWEEP) or {}).get("status") != "complete"]
    if not unfinished:
        raise UserError(f"--resume: no unfinished sweep named {cfg.name!r} under {base}/; pass its directory")
    return unfinished[-1]


def _new_dir(cfg: SweepConfig, sweep_id: str | None) -> Path:
    base = Path(cfg.output_dir)
    if sweep_id:
        d = base / check_run_id(sweep_id, "--sweep-id", SWEEP_ID_MAX_LENGTH)
        if d.exists():
            raise UserError(f"--sweep-id {sweep_id}: {d} exists; pick another id or use --resume {d}")
        return d
    stem = f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
    d, k = base / stem, 2
    while d.exists():
        d, k = base / f"{stem}-{k}", k + 1
    return d


def run_sweep(args: argparse.Namespace) -> int:
    from slabench.core.schema import SWEEP
    from slabench.sweep.config import load_sweep
    from slabench.sweep.runner import SweepRunner, read_json

    cfg = _apply_overrides(load_sweep(args.config), args)
    api_key_from_env(cfg.target.api_key_env, f"{args.config}: target.api_key_env")  # before any load
    contract = None
    if args.sla:  # a bad contract stops us before any load is sent
        from slabench.sla.contract import load_contract

        contract = load_contract(args.sla)
    console = Console(stderr=True)
    if args.search and (contract is None or args.resume):
        raise UserError("--search needs --sla CONTRACT (its checks decide) and a new sweep (not --resume)")
    if args.resume:
        sweep_dir = _resume_dir(cfg, args.resume)
        old = (read_json(sweep_dir / "sweep.json", SWEEP) or {}).get("config") or {}
        diff = _config_diff(old, cfg.model_dump(mode="json"))
        if diff:
            raise UserError(
                f"--resume {sweep_dir}: the config differs from the one it was started with in {', '.join(diff)}; "
                "resume with the same config, or start a new sweep"
            )
    else:
        sweep_dir = _new_dir(cfg, args.sweep_id)
    if not cfg.target.url:  # a sweep in a pod must name its server: refuse before creating anything
        from slabench.sweep.runner import refuse_simulator_in_cluster

        refuse_simulator_in_cluster(Path(args.config))
    source = "--target-url" if args.target_url else "config"
    if args.search and contract is not None:
        cfg, status = _search(cfg, args, contract, sweep_dir, console, source)
    else:
        runner = SweepRunner(cfg, Path(args.config), sweep_dir, console, target_source=source)
        console.print(f"sweep {sweep_dir.name}: levels {cfg.levels} × {cfg.repeats} repeats → {sweep_dir}")
        status = runner.run(resumed=bool(args.resume))
    if status == "interrupted":
        console.print(
            f"interrupted: finished runs are kept in {sweep_dir}; continue with\n"
            f"  slabench sweep --config {args.config} --resume {sweep_dir}"
        )
        return 130
    if not (args.no_report or not cfg.analysis.report):
        return _report(sweep_dir, cfg.analysis, None, None, console, as_json=False, contract=contract)
    console.print(f"done; aggregate with: slabench aggregate {sweep_dir}")
    if contract is None:
        return 0
    from slabench.sla.grade_run import grade_run_dir

    return _show_verdict(grade_run_dir(sweep_dir, contract), sweep_dir, console)


def _search(
    cfg: SweepConfig, args: argparse.Namespace, contract: LoadedContract, sweep_dir: Path, console: Console, source: str
) -> tuple[SweepConfig, str]:
    """Bisect for the highest passing level (`slabench.sweep.search`), then run the contract's own level if the
    search did not, so the verdict speaks for the contract's load. Returns the config of the levels run, and the
    runner's status."""
    from slabench.analysis.aggregate import aggregate
    from slabench.sweep.runner import SweepRunner
    from slabench.sweep.search import run_search, write_search

    status = "complete"

    def run_levels(levels: list[int]) -> SweepSummary:
        nonlocal status
        level_cfg = cfg.model_copy(update={"levels": levels})
        status = SweepRunner(level_cfg, Path(args.config), sweep_dir, console, target_source=source).run()
        if status == "interrupted":
            raise KeyboardInterrupt
        return aggregate(sweep_dir, warmup_s=None)

    console.print(
        f"sweep {sweep_dir.name}: searching concurrency {min(cfg.levels)}–{max(cfg.levels)} "
        f"(tolerance {args.search_tolerance}) × {cfg.repeats} repeats → {sweep_dir}"
    )
    try:
        search = run_search(cfg.levels, args.search_tolerance, contract, run_levels, console.print)
    except KeyboardInterrupt:
        return cfg, "interrupted"
    sweep_dir.mkdir(parents=True, exist_ok=True)
    write_search(search, sweep_dir / "search.json")
    console.print(f"search: beside a plan's answer: {compare_command(cfg, args, sweep_dir)}", soft_wrap=True)
    tested = sorted({s.level for s in search.steps})
    own = contract.contract.load.concurrency
    if own is not None and own not in tested:
        console.print(f"search: running the contract's own load, concurrency {own}, for its verdict")
        tested = sorted({*tested, own})
        try:
            run_levels(tested)
        except KeyboardInterrupt:
            return cfg, "interrupted"
    return cfg.model_copy(update={"levels": tested}), status


def compare_command(cfg: SweepConfig, args: argparse.Namespace, sweep_dir: Path) -> str:
    """The `slabench plan --compare-search` line for this search: the embedded simulator's own profile, model and
    --max-num-seqs, or a real server's calibrated profile (`slabench calibrate`) to fill in."""
    sim = cfg.simulator
    if cfg.target.url or sim.profile is None:
        what = "--profiles CALIBRATED.yaml --model MODEL"
    else:
        what = f"--profiles {sim.profile}" + (f" --model {sim.model_profile}" if sim.model_profile else "")
        what += f" --max-num-seqs {sim.max_num_seqs}" if sim.max_num_seqs else ""
    return f"slabench plan --compare-search {sweep_dir} --sla {args.sla} {what}"


def _show_verdict(verdict: Verdict, out_dir: Path, console: Console) -> int:
    from slabench.sla.grade_run import exit_code, write_verdict
    from slabench.sla.render import verdict_table

    console.print(f"verdict: {write_verdict(verdict, out_dir)}")
    console.print(verdict_table(verdict))
    return exit_code(verdict)


# -- aggregate ---------------------------------------------------------------------------------------------------
def _parse_slo(items: list[str]) -> dict[str, float] | None:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in ("ttft_s", "itl_s", "tpot_s", "e2e_s"):
            raise UserError(f"--slo {item}: write KEY=SECONDS with KEY one of ttft_s, itl_s, tpot_s, e2e_s")
        try:
            out[key] = float(value)
        except ValueError:
            raise UserError(f"--slo {item}: {value!r} is not a number of seconds") from None
        if out[key] <= 0:
            raise UserError(f"--slo {item}: must be > 0")
    return out or None


def _report(
    run_dir: Path,
    analysis: Analysis | None,
    slo: dict[str, float] | None,
    warmup_s: float | None,
    console: Console,
    as_json: bool,
    out: str | None = None,
    require: bool = False,
    contract: LoadedContract | None = None,
) -> int:
    """Aggregate, grade against `contract` when given, write the report (with the verdict in it), print; return the
    exit code (the verdict's, or 0)."""
    from slabench.analysis.aggregate import aggregate, require_ci, summary_json
    from slabench.analysis.cliff import CliffOptions
    from slabench.analysis.report import print_console, write_report

    out_dir = Path(out) if out else (run_dir if run_dir.is_dir() else run_dir.parent)
    check_output(out_dir, "--out", is_dir=True)  # before reading every record, not after
    cliff = CliffOptions(**analysis.cliff.model_dump()) if analysis is not None else None
    if slo is None and analysis is not None and analysis.slo is not None:
        slo = {k: v for k, v in analysis.slo.model_dump().items() if v is not None}
    summary = aggregate(run_dir, slo=slo, warmup_s=warmup_s, cliff_options=cliff)
    if require:
        require_ci(summary)
    out_dir = Path(out) if out else (run_dir if run_dir.is_dir() else run_dir.parent)
    verdict = None
    if contract is not None:
        from slabench.sla.grade_run import grade_summary
        from slabench.sla.render import verdict_section

        verdict = grade_summary(contract, summary, str(out_dir / "summary.json"))
    paths = write_report(summary, out_dir, verdict_section(verdict) if verdict is not None else None)
    if as_json:
        sys.stdout.write(summary_json(summary))
    else:
        print_console(summary)
        console.print(f"report: {paths['html']}  {paths['markdown']}  {paths['summary']}")
    return _show_verdict(verdict, out_dir, console) if verdict is not None else 0


def run_aggregate(args: argparse.Namespace) -> int:
    from slabench.core.schema import SWEEP
    from slabench.sweep.config import Analysis
    from slabench.sweep.runner import read_json

    run_dir = Path(args.run_dir)
    if not run_dir.exists():
        raise UserError(f"{run_dir}: no such directory or file")
    analysis = None
    meta = read_json(run_dir / "sweep.json", SWEEP) if run_dir.is_dir() else None
    if meta and isinstance(meta.get("config"), dict) and "analysis" in meta["config"]:
        try:
            analysis = Analysis.model_validate(meta["config"]["analysis"])
        except ValueError:
            analysis = None  # an older sweep.json: use the defaults
    if args.warmup_s is not None and args.warmup_s < 0:
        raise UserError(f"--warmup-s must be ≥ 0 (got {args.warmup_s})")
    contract = None
    if args.sla:
        from slabench.sla.contract import load_contract

        contract = load_contract(args.sla)
    return _report(
        run_dir,
        analysis,
        _parse_slo(args.slo),
        args.warmup_s,
        Console(stderr=True),
        args.json,
        out=args.out,
        require=args.require_ci,
        contract=contract,
    )
