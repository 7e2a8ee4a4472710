"""The one rule for a run id, wherever one is taken (`--run-id`, the web UI's start form, `--sweep-id`, a spool's
run id, `slabench deploy --run-id`): it names a folder (``runs/<run-id>/``) and an S3 prefix, so it is one path
component of letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit, at most 128 characters (a
sweep's stage ids add ~30 to its sweep id; a file name holds 255 bytes). ``../x``, ``/etc``, a newline or a
5,000-character id are refused with one line."""

from __future__ import annotations

import re

from slabench.core.errors import UserError

MAX_LENGTH = 128
SWEEP_ID_MAX_LENGTH = MAX_LENGTH - 32  # room for the stage suffix, -L<level>-r<repeat>-<6 hex>
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def run_id_problem(value: str, max_length: int = MAX_LENGTH) -> str | None:
    """Why `value` is not a run id, or None."""
    if len(value) <= max_length and _RUN_ID.fullmatch(value):
        return None
    shown = repr(value) if len(value) <= 80 else f"{value[:40]!r}… ({len(value)} characters)"
    return (
        f"{shown} is not a run id — use letters, digits, '.', '_' or '-', starting with a letter or digit, "
        f"at most {max_length} characters"
    )


def check_run_id(value: str, flag: str = "--run-id", max_length: int = MAX_LENGTH) -> str:
    """`value`, or UserError naming `flag`."""
    problem = run_id_problem(value, max_length)
    if problem is not None:
        raise UserError(f"{flag}: {problem}")
    return value
