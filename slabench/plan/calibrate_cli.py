"""`slabench calibrate RUN_DIR…`: fit a GPU profile (a measured step time, the cache size) from a closed-loop sweep
of one real server, so `slabench plan --profiles FILE` can size fleets of it. Method: docs/plan.md."""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table

from slabench.core.errors import UserError
from slabench.core.files import check_output
from slabench.core.textcols import add_documented_command

if TYPE_CHECKING:
    from slabench.plan.calibrate import MeasuredRun

MAX_TOKENS = 1 << 24  # 16M tokens of context: beyond any served model
MAX_FACTOR = 10.0  # the widest step-time uncertainty a profile states (Uncertainty.step_time_factor_90's bound)

FIGURES = (("TTFT p50", "ttft_p50", "ms"), ("E2E p50", "e2e_p50", "ms"), ("req/s", "throughput_rps", ""),
           ("out tok/s", "output_tokens_per_s", ""))  # fmt: skip


class CalibrationView:
    """Measured vs simulated per run, one row each. Narrower than 120 columns (a CI log is 80) each figure stacks
    measured over → simulated over the difference, and the run's users over its requests."""

    def __init__(self, name: str, rows: list[tuple[str, str, int, int, dict[str, float], dict[str, float]]]) -> None:
        self.name, self.rows = name, rows  # (fit|validate, run, users, requests, measured, simulated)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        narrow = options.max_width < 120
        title = f"slabench calibrate — {self.name}: measured vs simulated with the fitted step time"
        table = Table(title=title, title_justify="left")
        heads = ["run", "users\nrequests"] if narrow else ["run", "users", "requests"]
        for h in heads + [f"{t} ({u})" if u else t for t, _, u in FIGURES]:
            table.add_column(h, justify="left" if h == "run" else "right", no_wrap=True)
        sep = "\n" if narrow else " "
        for kind, run, users, requests, meas, sim in self.rows:
            cells = []
            for _, key, unit in FIGURES:
                scale = 1000 if unit == "ms" else 1
                m, s = meas[key], sim[key]
                cells.append(f"{m * scale:,.1f}{sep}→ {s * scale:,.1f}{sep}({(s / m - 1) * 100:+.0f}%)")
            who = [f"{users}\n{requests:,}"] if narrow else [str(users), f"{requests:,}"]
            table.add_row(f"{kind}:{sep}{run}", *who, *cells)
        yield table


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_documented_command(
        sub, "calibrate", "fit a GPU profile (measured step time, KV cache size) from a sweep of a real server", __doc__
    )
    p.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="a sweep directory, run directories or records")
    p.add_argument("--out", required=True, metavar="FILE", help="the GPU profile to write (YAML)")
    p.add_argument("--name", help="the profile's name (default: the file's stem)")
    m = p.add_mutually_exclusive_group(required=True)
    m.add_argument("--model", help="the served model's profile: built-in name or YAML path")
    m.add_argument(
        "--model-config",
        metavar="CONFIG",
        help="the served model's Hugging Face config.json (or its folder): a model profile is written beside --out",
    )
    p.add_argument("--max-model-len", type=int, help="the server's --max-model-len (default: the model's)")
    p.add_argument("--max-num-seqs", type=int, default=256, help="the server's --max-num-seqs (default: vLLM's 256)")
    p.add_argument(
        "--max-num-batched-tokens",
        type=int,
        default=2048,
        help="the server's --max-num-batched-tokens (default: vLLM's 2048 for the OpenAI server)",
    )
    p.add_argument(
        "--kv-cache-tokens",
        type=int,
        help="the server's KV cache in tokens (vLLM logs 'KV cache size: N tokens'); default: from server metrics",
    )
    p.add_argument("--validate", nargs="+", default=[], metavar="RUN_DIR", help="further runs to predict, not fit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from slabench.plan import calibrate as C
    from slabench.sim.profiles import EngineOptions, Uncertainty, load_model_profile

    t0 = time.perf_counter()
    out = Path(args.out)
    if out.suffix not in (".yaml", ".yml"):
        raise UserError(f"--out {out}: the profile is YAML; name it e.g. {out.with_suffix('.yaml')}")
    for flag, value in (("--max-model-len", args.max_model_len), ("--kv-cache-tokens", args.kv_cache_tokens)):
        if value is not None and value < 1:
            raise UserError(f"{flag} {value}: must be at least 1 (or leave it out for the default)")
    if args.max_model_len is not None and args.max_model_len > MAX_TOKENS:
        raise UserError(f"--max-model-len {args.max_model_len}: more than {MAX_TOKENS:,} tokens is no real server's")
    if args.kv_cache_tokens is not None and args.kv_cache_tokens > MAX_TOKENS * 1024:
        raise UserError(f"--kv-cache-tokens {args.kv_cache_tokens}: more than {MAX_TOKENS * 1024:,} tokens")
    check_output(out, "--out")  # before the fit, not after it
    runs = C.read_runs(args.run_dirs)
    checks = C.read_runs(args.validate)
    C.check_one_model(runs + checks)
    if args.model_config:
        model = C.model_from_config(args.model_config, args.max_model_len)
    else:
        model = load_model_profile(args.model)
        if args.max_model_len:
            model = model.model_copy(update={"max_model_len": args.max_model_len})
    kv = args.kv_cache_tokens or C.estimate_kv_tokens(runs + checks)
    if not kv:
        raise UserError(
            "the KV cache size is unknown: the runs have no server_metrics.jsonl with kv_cache_usage_perc — give "
            "--kv-cache-tokens N (vLLM logs 'KV cache size: N tokens' at start-up)"
        )
    for name in ("max_num_seqs", "max_num_batched_tokens"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1")
    longest = max(int((r.mix.prompt_tokens + r.mix.output_tokens).max()) for r in runs + checks)
    if kv // 16 * 16 < longest:
        raise UserError(
            f"--kv-cache-tokens {kv}: smaller than the runs' longest request ({longest} tokens, prompt and answer) — "
            "the server could not have served it; give the size vLLM logs ('KV cache size: N tokens')"
        )
    options = EngineOptions(
        num_gpu_blocks_override=max(1, kv // 16),
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
    )
    for why in C.measurement_doubts(runs + checks):
        print(f"slabench calibrate: warning: {why}", file=sys.stderr)
    result = C.fit(runs, model, options)
    cal = C.calibration(runs, result, model, options)
    judged = [("fit", r, cal.intervals(r, model, options)) for r in runs]
    judged += [("validate", r, cal.intervals(r, model, options)) for r in checks]
    # The plan's step-time interval: throughput is the step time's direct image, so the widest throughput interval
    # of any run calibrate saw (the held-out ones extrapolate farthest) is the factor a plan allows either way.
    widest = max(math.log(iv["throughput_rps"][2] / iv["throughput_rps"][0]) for _, _, iv in judged)
    if widest > math.log(MAX_FACTOR):
        print(
            f"slabench calibrate: warning: the fit pins the step time only within ×{math.exp(widest):.3g} either way "
            f"at 90 % ({len(runs)} run(s), {cal.dof} degree(s) of freedom left after 5 coefficients); the profile "
            f"states ×{MAX_FACTOR:g} — measure more levels, or repeat them, for a plan worth its interval",
            file=sys.stderr,
        )
    name = args.name or out.stem
    levels = ", ".join(str(r.users) for r in runs)
    sources = sorted({str(Path(r.source)) for r in runs})
    gpu = C.gpu_profile(
        name,
        result.step,
        options,
        source=f"slabench calibrate {time.strftime('%Y-%m-%d')}: fitted to {len(runs)} run(s) at {levels} users "
        f"({', '.join(sources)})",
        description=f"measured: {model.name} on the server of {sources[0]}",
    ).model_copy(
        update={
            "uncertainty": Uncertainty(
                step_time_factor_90=round(min(math.exp(widest), MAX_FACTOR), 4),
                levels=levels_seen(judged),
                source=f"slabench calibrate {time.strftime('%Y-%m-%d')}: the widest 90 % throughput interval of its "
                f"{len(judged)} run(s), from the fit's residuals (σ = {_sigma(cal.residual_variance)}) and the "
                f"repeats' spread (σ = {_sigma(cal.repeat_variance)})",
            )
        }
    )
    context = float(sum(r.mix.prompt_tokens.mean() for r in runs) / len(runs))
    derived = C.rates(result.step, context)
    header = [
        f"Fitted by `slabench calibrate` on {time.strftime('%Y-%m-%d')} ({result.evaluations} simulations, "
        f"loss {result.loss:.4f}: Σ squared log errors of TTFT p50, E2E p50, throughput).",
        f"prefill ~{derived['prefill_tokens_per_s']:,.0f} tokens/s; one request alone at {context:,.0f} tokens of "
        f"context decodes ~{derived['decode_tokens_per_s_alone']:,.0f} tokens/s; KV cache {kv:,} tokens"
        + (" (given)" if args.kv_cache_tokens else " (estimated from kv_cache_usage_perc)"),
        f"model profile: {model.name}",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(C.profile_yaml(gpu, header))
    model_path = None
    if args.model_config:
        model_path = out.with_name(f"{out.stem}-model.yaml")
        model_path.write_text(C.model_yaml(model))

    intervals_path = out.with_name(f"{out.stem}-intervals.json")
    report = interval_report(judged)
    intervals_path.write_text(json.dumps(report, indent=2) + "\n")
    rows = [("fit", r, s) for r, s in result.rows]
    fitted_gpu = C.gpu_profile(name, result.step, options, "fit")
    rows += [("validate", r, C.simulate(r, fitted_gpu, model)) for r in checks]
    table = CalibrationView(
        name,
        [(kind, "/".join(Path(r.source).parts[-2:]), r.users, r.requests, r.figures, sim) for kind, r, sim in rows],
    )
    console = Console()
    console.print(table)
    st = result.step
    console.print(
        f"step time = {st.overhead_ms:.3g} ms + {st.per_sequence_us:.3g} µs/request + {st.per_token_us:.3g} µs/token"
        f" + {st.per_context_token_ns:.3g} ns/context token + {st.per_attention_pair_ns:.3g} ns/attention pair"
    )
    for h in header[1:2]:
        console.print(h)
    lo, hi = levels_seen(judged)
    console.print(
        f"90 % intervals ({intervals_path}): step time within ×1/{gpu.uncertainty.step_time_factor_90:.3g} … "
        f"×{gpu.uncertainty.step_time_factor_90:.3g} at {lo:g}–{hi:g} users, widening beyond ({WIDENING}); "
        f"{gpu.uncertainty.source}"
    )
    if report["held_out"]["figures"]:
        console.print(coverage_line(report["held_out"]))
    written = f"{out}" + (f" and {model_path}" if model_path else "")
    console.print(
        f"wrote {written} ({time.perf_counter() - t0:.1f} s); plan with it: slabench plan --profiles {out}"
        + (f" --model {model_path}" if model_path else f" --model {args.model}")
        + " --price NAME=USD"
    )
    return 0


WIDENING = "f^r, r = level ÷ the highest seen, or the lowest ÷ level"


def levels_seen(judged: list[tuple[str, MeasuredRun, Any]]) -> tuple[float, float]:
    """The lowest and highest users of the runs calibrate judged (fitted and held out): its factor covers them."""
    users = [float(r.users) for _, r, _ in judged]
    return min(users), max(users)


def _sigma(variances: dict[str, float]) -> str:
    return ", ".join(f"{m.replace('_rps', '')} {math.sqrt(v):.1%}" for m, v in variances.items())


def interval_report(judged: list[tuple[str, MeasuredRun, dict[str, tuple[float, float, float]]]]) -> dict[str, Any]:
    """Per run, each figure measured, predicted and its 90 % interval; for the held-out (--validate) runs, the share
    of figures inside their interval and the median error per metric."""
    runs: list[dict[str, Any]] = []
    inside: list[bool] = []
    errors: dict[str, list[float]] = {}
    for kind, run, iv in judged:
        figures = {}
        for m, (pred, lo, hi) in iv.items():
            measured = run.figures[m]
            hit = lo <= measured <= hi
            figures[m] = {"measured": measured, "predicted": pred, "low": lo, "high": hi, "inside": hit}
            if kind == "validate":
                inside.append(hit)
                errors.setdefault(m, []).append(abs(pred / measured - 1))
        runs.append({"kind": kind, "run": run.source, "users": run.users, "figures": figures})
    held_out = {
        "figures": len(inside),
        "inside": sum(inside),
        "coverage": sum(inside) / len(inside) if inside else None,
        "median_abs_error": {m: statistics.median(v) for m, v in errors.items()},
    }
    return {"kind": "slabench.calibration_intervals", "schema_version": 1, "interval": 0.90, "runs": runs,
            "held_out": held_out, "levels_seen": list(levels_seen(judged)), "beyond_levels_seen": WIDENING}  # fmt: skip


def coverage_line(held_out: dict[str, Any]) -> str:
    errs = ", ".join(f"{m} {e:.1%}" for m, e in held_out["median_abs_error"].items())
    return (
        f"held-out: {held_out['inside']} of {held_out['figures']} figures inside their 90 % interval "
        f"({held_out['coverage']:.0%}); median |error|: {errs}"
    )
