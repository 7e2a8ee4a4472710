"""Errors that are the user's to fix, and the process exit codes every slabench entry point shares.

Exit codes (documented in docs/sla.md): 0 PASS, 1 CONDITIONAL, 2 FAIL, 3 bad input (a file, flag or option the user
must fix; never an SLA result), 4 measurement incomplete or invalid (records lost, requests not sent, a lost worker,
a saturated load generator, a run that answered no request), 5 the platform failed before a verdict (deploy).
"""

from enum import IntEnum


class ExitCode(IntEnum):
    PASS = 0
    CONDITIONAL = 1
    FAIL = 2
    BAD_INPUT = 3
    INCOMPLETE = 4
    PLATFORM = 5


class UserError(Exception):
    """Bad input (a file, a flag, a config field). The message names what is wrong and how to fix it."""

    exit_code = ExitCode.BAD_INPUT


class MeasurementIncomplete(UserError):
    """The run did not measure what it claims (lost records, a lost worker, nothing answered): one line, exit 4."""

    exit_code = ExitCode.INCOMPLETE
