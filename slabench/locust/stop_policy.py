"""When a run stops early and which exit code a run leaves: every request refused from the start stops it with exit
3, the server failing every request with exit 4 (one line says why, the first watch to fire); at the end, what the
run lacks, a load generator frozen mid-run and a saturated one (judged here by the default measurement policy, or
by the contract's with --sla) make it exit 4, as run_status.json says."""

from __future__ import annotations

import logging

import gevent
from locust.env import Environment
from locust.runners import Runner

from slabench.core.errors import ExitCode
from slabench.evidence.run_status import RunStatus

log = logging.getLogger("slabench")


class StopPolicy:
    def __init__(self, environment: Environment, runner: Runner, headless: bool) -> None:
        self.env, self.runner, self.headless = environment, runner, headless
        self.reason: str | None = None  # the one line that stopped the run (refusals, failures)
        self.code: int | None = None  # and the exit code it set
        self.contract_judges_saturation = False  # --sla: the contract's measurement policy judges saturation

    def new_run(self) -> None:
        """A new run from the web UI after a stopped or incomplete one decides its exit anew."""
        if self.reason is not None and self.env.process_exit_code == self.code:
            self.env.process_exit_code = None
        if self.env.process_exit_code == ExitCode.INCOMPLETE:
            self.env.process_exit_code = None
        self.reason = self.code = None

    def stop_for(self, reason: str, code: int) -> None:
        """Stop the run with that one line and exit code."""
        if self.reason is not None:
            return  # one line: the first watch to fire says why
        self.reason, self.code = reason, code
        log.error("slabench: %s", reason)
        self.set_exit_code(code)
        gevent.spawn(self._stop_runner)  # not from inside a user's greenlet (stopping kills the users)

    def set_exit_code(self, code: int) -> None:
        self.env.process_exit_code = code

    def _stop_runner(self) -> None:
        if self.headless:
            self.runner.quit()
        else:
            self.runner.stop()  # the web UI stays up, showing the error

    def judge_end(self, status: RunStatus) -> None:
        """The finished run's exit: 4 when it lacks anything, its load generator froze, or it was saturated (no
        contract judges a freeze, so that makes it exit 4 either way; with --sla the verdict's code is the run's
        for saturation, slabench.locust.sla)."""
        frozen = []
        if status.stalls:
            worst = max(status.stalls, key=lambda st: st.seconds)
            frozen.append(
                f"the load generator was frozen {len(status.stalls)} time(s), "
                f"{sum(st.seconds for st in status.stalls):.2f} s in all (up to {worst.seconds:.2f} s, "
                f"{worst.worker}): the requests in flight then are left out of the latency figures"
            )
            log.warning("slabench: %s", frozen[0])
        graded = self.contract_judges_saturation
        for reason in status.saturated:
            judged = " (the contract's measurement policy judges it)" if graded else ""
            log.warning("slabench: measurement doubtful: %s%s", reason, judged)
        own = [r for r in status.reasons() if not (self.reason and self.reason in r)]
        doubtful = [*frozen, *([] if graded else (f"measurement doubtful: {r}" for r in status.saturated))]
        reasons = [*own, *doubtful]
        if reasons:
            log.error("slabench: the run is incomplete (exit %d): %s", ExitCode.INCOMPLETE, "; ".join(reasons))
            if self.env.process_exit_code in (None, 0, 1, 2):
                self.env.process_exit_code = ExitCode.INCOMPLETE
