"""The embedded simulator as a child process — the one way both the Locust plugin (no --host) and a sweep (no
target.url) start it: `slabench simulate --port 0`, at a lower CPU priority (`EMBEDDED_NICE`), exiting with its
parent, in its own session (a Ctrl+C in the terminal stops the load generator, which cancels its requests and then
stops the simulator; the simulator taking the signal too would cut the streams still in flight into errors)."""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from slabench.core.errors import UserError
from slabench.sim.cli import EMBEDDED_NICE

LISTENING = "slabench simulator listening on "
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


class EmbeddedSimulator:
    def __init__(self, sim_argv: Sequence[str], log: Path | None = None) -> None:
        """Start it with these `slabench simulate` flags. Its messages go to `log` (appended), else to this process's
        stderr, where the user sees them. Raises UserError, with its last message, when it does not say where it
        listens within START_TIMEOUT_S."""
        self.argv = [sys.executable, "-m", "slabench", "simulate", "--port", "0", "--parent-pid", str(os.getpid())]
        self.argv += ["--nice", str(EMBEDDED_NICE), *sim_argv]
        log_file = log.open("a", encoding="utf-8") if log is not None else None
        try:
            self.proc = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=log_file, text=True, start_new_session=True
            )
        finally:
            if log_file is not None:
                log_file.close()  # the child holds its own copy
        line = self._first_line()
        if not line.startswith(LISTENING):
            self.stop()
            if log is None:
                why = "its message is above"
            else:
                said = log.read_text(encoding="utf-8").strip().splitlines()
                why = said[-1].removeprefix("slabench: ") if said else line or "it said nothing"
            raise UserError(f"the embedded simulator did not start: {why}")
        self.url = line.removeprefix(LISTENING)

    def _first_line(self) -> str:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:  # gevent's, in a patched process: other greenlets go on meanwhile
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(START_TIMEOUT_S):
                return ""
        return self.proc.stdout.readline().strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
