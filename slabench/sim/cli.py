"""`slabench simulate`: serve the embedded simulator on a port."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from slabench.core.api_key import api_key_from_env
from slabench.core.errors import UserError

if TYPE_CHECKING:
    from slabench.sim.engine import Engine


def add_sim_options(p: argparse.ArgumentParser, prefix: str = "") -> None:
    """Simulator knobs; `prefix` lets the Locust plugin offer the same ones as --sim-*."""
    p.add_argument(f"--{prefix}model", default="slabench-sim", help="served model name")
    p.add_argument(f"--{prefix}ttft", type=float, default=0.1, help="seconds to the first token (fixed-latency engine)")
    p.add_argument(f"--{prefix}itl", type=float, default=0.01, help="seconds between tokens (fixed-latency engine)")
    p.add_argument(f"--{prefix}jitter", type=float, default=0.0, help="± fraction of random jitter on TTFT and ITL")
    p.add_argument(f"--{prefix}output-tokens", type=int, default=128, help="tokens the model says before EOS")
    p.add_argument(
        f"--{prefix}reasoning-tokens",
        type=int,
        default=0,
        help="chat and Responses: a reasoning phase of this many tokens before the answer (a reasoning model; "
        "counted in the completion and in usage's reasoning_tokens)",
    )
    p.add_argument(f"--{prefix}stream-interval", type=int, default=1, help="tokens coalesced per chunk, like vLLM's")
    p.add_argument(f"--{prefix}seed", type=int, default=0)
    p.add_argument(
        f"--{prefix}profile",
        default="",
        help="simulate vLLM on this GPU (a10g, l4, l40s, rtx-pro-4500, rtx-pro-6000, rtx-pro-6000-mig-2g.48gb, or "
        "a YAML path) instead of fixed latencies",
    )
    p.add_argument(f"--{prefix}model-profile", default="llama-3.1-8b-fp8", help="model profile (name or YAML path)")
    p.add_argument(f"--{prefix}max-num-seqs", type=int, default=None, help="vLLM --max-num-seqs (profile engine)")
    p.add_argument(
        f"--{prefix}grading-accuracy",
        type=float,
        default=0.9,
        help="grading mode: share of rubric items the simulated model scores right (QA-grading requests)",
    )


# An embedded simulator shares the machine with the load generator: when both want the CPU, the generator goes first,
# so a busy machine makes the stand-in server late (which the records show as server time) rather than the
# generator's sends (lateness) and stamps. Measured: the full 20k burst's lateness p99 halves (docs/benchmarks.md).
EMBEDDED_NICE = 10


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("simulate", help="serve the embedded OpenAI-compatible simulator")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (0 picks a free one)")
    add_sim_options(p)
    p.add_argument("--api-key-env", default=None, help="require the API key held in this environment variable")
    p.add_argument("--load-time", type=float, default=0.0, help="/health answers 503 for this many seconds")
    p.add_argument(
        "--dev-mode",
        action="store_true",
        help="serve vLLM's development endpoints (POST /reset_prefix_cache), as vLLM does with VLLM_SERVER_DEV_MODE=1",
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KIND=RATE",
        help="inject a fault into this share of requests (repeatable): http_500, http_503, http_429, "
        "reset, stall, malformed, no_usage, slow_start; or per request with header X-Slabench-Fault",
    )
    p.add_argument("--stall-s", type=float, default=5.0, help="how long a `stall` fault stays silent")
    p.add_argument("--slow-start-s", type=float, default=2.0, help="how long a `slow_start` fault delays the headers")
    p.add_argument(
        "--nice",
        type=int,
        default=0,
        help="lower the simulator's CPU priority by this much, 0-19 (on a machine it shares with the load "
        "generator, the generator's timing should come first; started by Locust or a sweep it uses "
        f"{EMBEDDED_NICE})",
    )
    p.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=run)


def sim_args_to_argv(values: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Inverse of add_sim_options (with `prefix` as in the caller's namespace) for starting a simulator process;
    options not in `values`, or None, are left to the simulator's defaults."""
    probe = argparse.ArgumentParser(add_help=False)
    add_sim_options(probe)
    known = {prefix + a.dest for a in probe._actions}
    unknown = sorted(k for k in values if k.startswith(prefix) and k not in known)
    if unknown:  # a renamed or misspelt option would otherwise be left out without a word
        raise ValueError(f"not `slabench simulate` options: {', '.join(unknown)}")
    argv = []
    for action in probe._actions:
        value = values.get(prefix + action.dest)
        if value not in (None, ""):
            argv += [action.option_strings[0], str(value)]
    return argv


def build_sim_engine(args: argparse.Namespace) -> Engine:
    """The fixed-latency engine, or with --profile the vLLM capacity model of that GPU."""
    from slabench.sim.engine import FixedLatencyEngine

    if not args.profile:
        return FixedLatencyEngine(
            ttft=args.ttft, itl=args.itl, jitter=args.jitter, seed=args.seed, stream_interval=args.stream_interval
        )
    from slabench.sim.profiles import load_profile
    from slabench.sim.vllm_engine import VllmEngine

    overrides = {"stream_interval": args.stream_interval}
    if args.max_num_seqs:
        overrides["max_num_seqs"] = args.max_num_seqs
    return VllmEngine(load_profile(args.profile, args.model_profile, overrides), seed=args.seed)


def run(args: argparse.Namespace) -> int:
    from gevent import monkey

    monkey.patch_all()
    import gevent

    from slabench.sim.faults import FaultPlan, parse_fault_flags
    from slabench.sim.grading import GradingResponder
    from slabench.sim.server import SimConfig, SimServer, watch_parent
    from slabench.sim.vllm_engine import VllmEngine

    for name in ("ttft", "itl", "jitter"):
        if getattr(args, name) < 0:
            raise UserError(f"--{name} must be ≥ 0 (got {getattr(args, name)})")
    if args.output_tokens < 1 or args.stream_interval < 1:
        raise UserError("--output-tokens and --stream-interval must be ≥ 1")
    if args.reasoning_tokens < 0:
        raise UserError(f"--reasoning-tokens must be ≥ 0 (got {args.reasoning_tokens})")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port {args.port}: must be between 0 and 65535 (0 picks a free port)")
    if not 0 <= args.nice <= 19:
        raise UserError(f"--nice {args.nice}: must be between 0 and 19")
    if args.nice:
        os.nice(args.nice)
    api_key = None
    if args.api_key_env:
        api_key = api_key_from_env(args.api_key_env)
        if not api_key:
            raise UserError(f"--api-key-env {args.api_key_env}: that environment variable is empty or unset")
    engine = build_sim_engine(args)
    max_model_len = engine.config.max_model_len if isinstance(engine, VllmEngine) else 32768  # with --profile
    faults = FaultPlan(parse_fault_flags(args.fault), args.stall_s, args.slow_start_s, args.seed)
    config = SimConfig(
        model=args.model,
        output_tokens=args.output_tokens,
        reasoning_tokens=args.reasoning_tokens,
        api_key=api_key,
        load_time=args.load_time,
        seed=args.seed,
        faults=faults,
        max_model_len=max_model_len,
        respond=GradingResponder(args.grading_accuracy, args.seed),
        dev_mode=args.dev_mode,
    )
    try:
        server = SimServer(engine, config, host=args.host, port=args.port).start()
    except OSError as e:
        raise UserError(f"cannot listen on {args.host}:{args.port}: {e.strerror}") from None
    print(f"slabench simulator listening on http://{args.host}:{server.port}", flush=True)
    if args.parent_pid:
        gevent.spawn(watch_parent, args.parent_pid)
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    except Exception as e:  # a simulator bug: gevent has printed the engine loop's traceback
        print(f"slabench simulate: stopped serving: the engine loop failed ({e!r})", file=sys.stderr)
        return 1
    return 0
