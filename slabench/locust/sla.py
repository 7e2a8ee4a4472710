"""The Locust-side SLA hook: ``locust -f ... --headless --sla sla/config_sla_example.yaml`` grades the run when it
stops and sets the process exit code, for CI users who never run the sweep.

- ``--sla FILE``: the contract, loaded and checked when Locust starts (a bad contract exits 3 before any load is
  sent). On the master or local runner (never on a worker), when the test stops and the records are written, the
  run's records are graded (`sla.single_run`: one run, so every verdict says "single run"), the verdict is logged
  line by line and written as ``verdict.json`` / ``verdict.md`` beside the records.
- Exit code: 0 PASS, 1 CONDITIONAL (0 with ``--sla-allow-conditional``), 2 FAIL, 3 invalid input (e.g. a quality
  floor for a task the run did not grade; a misspelt Locust option, `slabench.locust.options.usage_errors_exit_3`),
  4 when the run is incomplete whatever the verdict (a lost worker, requests not sent, no request answered, saturation:
  `run_status.json` says why). With ``--sla`` the contract decides: it replaces Locust's own "any failed request
  → 1" rule (the contract's error_rate is the judge of errors).
- The load: records stamped by a shape carry their level; a plain run's records do not, so the run is taken to be
  at concurrency ``-u`` (without a shape) — a contract for another load then has no data and FAILS, honestly.

`install()` registers on Locust's event hooks once (idempotent). Grading rides on the record hub's own `run_ended`,
which comes after the records are closed and `run_status.json` is written.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from locust import events
from locust.env import Environment
from locust.runners import WorkerRunner

from slabench.core.errors import ExitCode, UserError
from slabench.locust.hooks import install_once
from slabench.locust.hub import hub_of
from slabench.locust.options import options

log = logging.getLogger("slabench.sla")


def add_options(parser: Any) -> None:
    g = parser.add_argument_group("slabench SLA")
    g.add_argument(
        "--sla",
        default="",
        metavar="FILE",
        help="grade the run against this SLA contract at the end; exit 0 PASS, 1 CONDITIONAL, 2 FAIL, 3 bad input",
    )
    g.add_argument(
        "--sla-merge-runs",
        action="store_true",
        default=False,
        help="grade every run in the records file as one (with --append; default: refuse a file of several runs)",
    )
    g.add_argument(
        "--sla-allow-conditional",
        action="store_true",
        default=False,
        help="exit 0 on a CONDITIONAL verdict (default: 1)",
    )


class SlaHook:
    """Per process (master/local runner): the loaded contract and the last verdict."""

    def __init__(self, environment: Environment, loaded: Any) -> None:
        self.env = environment
        self.loaded = loaded
        self.verdict: Any = None

    def records_path(self) -> Path | None:
        return hub_of(self.env).store.path

    def run_level(self) -> Any:
        """The load of a plain run (no shape): concurrency = the user count asked for."""
        from slabench.sla.estimates import Level

        if self.env.shape_class is not None:
            return None
        users = getattr(self.env.parsed_options, "num_users", None)
        return Level(concurrency=int(users)) if users else None

    def grade(self) -> int:
        """Grade the finished run; return the exit code to use."""
        from slabench.sla.grade_run import (
            exit_code,
            grade_input,
            read_single_run,
            with_provenance_notes,
            write_verdict,
        )
        from slabench.sla.render import verdict_lines

        path = self.records_path()
        if path is None or not path.exists():
            log.error("slabench sla: no records to grade (expected %s); FAIL", path)
            return 2
        try:
            merge = options(self.env).sla_merge_runs
            verdict = grade_input(self.loaded, read_single_run(path, self.run_level(), merge))
            # what served the run (run_status.json's provenance, written before this) against the contract
            verdict = with_provenance_notes(verdict, self.loaded, path)
        except UserError as e:
            log.error("slabench sla: %s", e)
            return UserError.exit_code
        self.verdict = verdict
        for line in verdict_lines(verdict):
            log.info("slabench sla: %s", line)
        out = write_verdict(verdict, path)
        log.info("slabench sla: verdict %s → %s", verdict.status, out)
        code = exit_code(verdict)
        if code == 1 and options(self.env).sla_allow_conditional:
            return 0
        return code


def _on_init(environment: Environment, runner: Any, **_: Any) -> None:
    opts = environment.parsed_options
    if runner is None or isinstance(runner, WorkerRunner) or opts is None or not getattr(opts, "sla", ""):
        return
    from slabench.sla.contract import load_contract

    try:
        loaded = load_contract(opts.sla)
        _check_one_run(opts)
    except UserError as e:
        log.error("slabench sla: %s", e)
        raise SystemExit(UserError.exit_code) from None
    hook = SlaHook(environment, loaded)
    hub = hub_of(environment)
    hub.parts.put(hook)  # the web UI's LLM tab shows its verdict
    hub.stop_policy.contract_judges_saturation = True
    hub.run_ended.append(lambda: _grade(environment, hook))  # records closed, run_status.json written


def _check_one_run(opts: Any) -> None:
    """Before any load: appending to a file of earlier runs would end in a verdict over all of them; say so now."""
    from slabench.core.sinks import has_records, planned_records_path

    path = planned_records_path(opts.records, opts.run_id)
    if opts.append and not opts.sla_merge_runs and path is not None and has_records(path):
        raise UserError(
            f"--append to {path} with --sla: the verdict would be over the earlier runs' records too — pass "
            "--sla-merge-runs to grade them all as one run, or a new --records path"
        )


def _grade(environment: Environment, hook: SlaHook) -> None:
    hub = hub_of(environment)
    if hub.stop_policy.reason:
        log.error("slabench sla: not graded: the run was stopped early (the reason is in the line above)")
        return  # its exit stands (3: a refused key, model or URL; 4: a failing server): not an SLA result
    code = hook.grade()
    # a run that did not measure what it claims (a lost worker, nothing answered) exits 4 whatever the verdict
    if hub.run.status is not None and hub.run.status.reasons() and code != ExitCode.BAD_INPUT:
        code = ExitCode.INCOMPLETE
    environment.process_exit_code = code


def install(hooks: Any = events) -> None:
    """Register the SLA hook on Locust's event hooks (idempotent)."""
    install_once(hooks, "sla", add_options, _on_init)
