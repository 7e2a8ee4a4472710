"""slabench's command line in Locust: its options (in the web UI's start form too), their checks before any load,
and the run-time cap of a smoke run. A usage mistake exits 3 (bad input), never Locust's 2 (an SLA FAIL to CI)."""

from __future__ import annotations

import logging
from argparse import Namespace
from pathlib import Path
from typing import Any

import gevent
from locust.env import Environment

from slabench.core.api_key import api_key_from_env
from slabench.core.errors import UserError
from slabench.core.files import check_output
from slabench.core.protocols import PROTOCOLS
from slabench.core.run_id import check_run_id
from slabench.core.runcap import ENV as RUNCAP_ENV
from slabench.core.runcap import capped
from slabench.core.sse import DEFAULT_MAX_EVENT_BYTES
from slabench.locust.distributed import install_port_defaults
from slabench.sim.cli import add_sim_options

log = logging.getLogger("slabench")


def options(environment: Environment) -> Namespace:
    """The parsed command line; every slabench hook runs in a Locust started with one (the locust command, or a test
    that passes `parsed_options`)."""
    opts: Namespace | None = environment.parsed_options
    if opts is None:
        raise RuntimeError("slabench runs under Locust's command line: the environment has no parsed_options")
    return opts


def usage_errors_exit_3(parser: Any) -> None:
    """Locust's argparse exits 2 on a usage error (a misspelt option, a bad value), and 2 is an SLA FAIL to CI: with
    slabench loaded such a mistake exits 3, bad input, with Locust's own message and spelling hint."""
    locust_error = parser.error

    def error(message: str) -> None:
        try:
            locust_error(message)
        except SystemExit as e:
            if e.code == 2:
                raise SystemExit(UserError.exit_code) from None
            raise

    parser.error = error


def add_options(parser: Any) -> None:
    usage_errors_exit_3(parser)
    g = parser.add_argument_group("slabench (LLM endpoint)")
    records = g.add_argument(
        "--records", default="", help="record file (.jsonl or .parquet); default runs/<run-id>/records.jsonl"
    )
    run_id = g.add_argument("--run-id", default="", help="run id (default: time-based, new for every test start)")
    append = g.add_argument(
        "--append",
        action="store_true",
        default=False,
        help="add this run to a --records file that already holds records (default: refuse it; grading several runs "
        "as one then needs --merge-runs)",
    )
    for action in (records, run_id, append):  # in the web UI's start form too (a group's options are not, by default)
        action.include_in_web_ui = True
    g.add_argument("--model", default="", help="model name (default: the first one the server lists at /v1/models)")
    g.add_argument(
        "--endpoint",
        choices=list(PROTOCOLS),
        default="chat",
        help="OpenAI API to call: chat (/v1/chat/completions), completions (/v1/completions: a chat request's "
        "messages sent as one prompt, without a chat template), or responses (the Responses API, /v1/responses: chat "
        "requests sent as its input)",
    )
    g.add_argument("--max-tokens", type=int, default=256, help="max_tokens per request")
    g.add_argument("--ignore-eos", action="store_true", default=False, help="ask vLLM to always produce max_tokens")
    g.add_argument("--prompt-tokens", type=int, default=512, help="synthetic prompt length (chat replay user)")
    g.add_argument("--prompts", default="", help="JSONL file of chat requests to replay instead of synthetic ones")
    g.add_argument(
        "--prompt-salt",
        default="",
        help="put [SALT] before every prompt, so a server's prefix cache cannot carry over from another run (a "
        "sweep sets it per repeat when the server cannot reset its cache)",
    )
    g.add_argument(
        "--tokenizer",
        default="",
        help="the served model's folder (tokenizer.json, chat template): size prompts as the server counts them "
        "(needs the `tokenizers` package); without it, synthetic sizes are calibrated from the server's usage",
    )
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    g.add_argument("--insecure", action="store_true", default=False, help="skip TLS certificate verification")
    g.add_argument(
        "--per-chunk-usage",
        choices=["on", "off"],
        default="on",
        help="ask for usage on every chunk (vLLM's continuous_usage_stats) to count tokens per chunk",
    )
    g.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to connect")
    g.add_argument(
        "--stall-timeout",
        type=float,
        default=120.0,
        help="seconds for the whole response head, then without a byte mid-stream, before giving up",
    )
    g.add_argument("--request-timeout", type=float, default=900.0, help="seconds for a whole request")
    g.add_argument(
        "--max-event-bytes",
        type=int,
        default=DEFAULT_MAX_EVENT_BYTES,
        help="longest SSE line or event accepted; a longer one makes the request a not_openai error",
    )
    g.add_argument(
        "--arrival-clock",
        choices=["kernel", "loop"],
        default="kernel",
        help="when a streamed event arrived: the kernel's receive timestamp of its bytes (plain HTTP on Linux; "
        "elsewhere the loop's), or when this process's event loop read them (what it was before; a busy process "
        "counts its own wait as the server's)",
    )
    g.add_argument(
        "--spool-dir",
        default=".slabench-spool",
        help="workers journal every request and record here until the master confirms it holds them "
        "(`slabench recover` merges spools after a lost master)",
    )
    g.add_argument(
        "--master-lost-timeout",
        type=float,
        default=5.0,
        help="worker: stop the load when the connection to the master has been down this many seconds",
    )
    g.add_argument(
        "--worker-missing-after",
        type=float,
        default=10.0,
        help="master: mark a worker missing after this many seconds without a heartbeat (Locust's own is ~4 s; "
        "workers send heartbeats from their own thread, so a longer silence is a dead or frozen process)",
    )
    g.add_argument(
        "--worker-join-timeout",
        type=float,
        default=60.0,
        help="headless master: give up (exit 4) when fewer workers than expected joined within this many seconds",
    )
    s = parser.add_argument_group("slabench embedded simulator (used when no --host is given)")
    add_sim_options(s, prefix="sim-")
    install_port_defaults(parser)


def check_options(environment: Environment) -> None:
    """The slabench options' ranges, the run id, the API key, the --records path and the --prompts file; raises
    UserError naming the option."""
    o = options(environment)
    for name, value, least in (
        ("--max-tokens", o.max_tokens, 1),
        ("--prompt-tokens", o.prompt_tokens, 1),
    ):
        if value < least:
            raise UserError(f"{name} {value}: must be at least {least}")
    for name, value in (
        ("--connect-timeout", o.connect_timeout),
        ("--stall-timeout", o.stall_timeout),
        ("--request-timeout", o.request_timeout),
        ("--master-lost-timeout", o.master_lost_timeout),
        ("--worker-missing-after", o.worker_missing_after),
    ):
        if not value > 0:
            raise UserError(f"{name} {value:g}: must be more than 0 seconds")
    if o.run_id:
        check_run_id(o.run_id)
    api_key_from_env(o.api_key_env)
    users = getattr(o, "num_users", None)
    if o.headless and environment.shape_class is None and users is not None and users < 1:
        raise UserError(f"-u {users}: a run needs at least 1 user (-u 1 or more), or a load shape")
    if o.records:
        p = Path(o.records)
        if p.suffix not in (".jsonl", ".ndjson", ".parquet"):
            raise UserError(f"--records {p}: use a .jsonl or .parquet path")
        check_output(p, "--records", is_dir=p.suffix == ".parquet")
    else:
        check_output(Path("runs"), "--records (default runs/<run-id>/records.jsonl)", is_dir=True)


def cap_run_time(environment: Environment) -> None:
    """SLABENCH_MAX_RUN_S (a smoke run of a printed command) shortens -t, and ends a shape's or an untimed run."""
    opts = options(environment)
    limit = capped(opts.run_time or None)
    if limit is None or limit == opts.run_time:
        return
    log.info("slabench: %s caps this run at %g s", RUNCAP_ENV, limit)
    opts.run_time = limit
    if environment.shape_class is not None:  # Locust starts its -t timer only once a headless shape has finished
        runner = environment.runner

        def stop_later(**_: Any) -> None:
            if runner is not None:
                gevent.spawn_later(limit, runner.stop)

        environment.events.test_start.add_listener(stop_later)
