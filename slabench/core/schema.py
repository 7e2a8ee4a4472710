"""What slabench writes says what it is (`kind`) and which schema it follows (`schema_version`, `schema_minor`), and
every reader checks both before it trusts a field. Reading a file of another schema as this one is how an error
becomes an OK and a FAIL a PASS, so such a file is refused with one line (exit 3).

The rule (docs/analysis.md, "Reading files of another version"):
- `schema_version` is the *major* version, an integer. It changes when a field is removed, renamed or changes meaning;
  a reader refuses every major version but its own.
- `schema_minor` (absent = 0) counts additions: a newer minor only adds fields, which a reader ignores, so it is read.
- `kind` names the file type. Records and run_status.json written before kinds were stamped (minor 0) carry none and
  are still read; from minor 1 on a missing kind is an error.
- A required field that is missing is an error, never a default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slabench.core.boundary import loads
from slabench.core.errors import UserError
from slabench.core.files import read_text


@dataclass(frozen=True)
class FileSchema:
    kind: str
    major: int
    minor: int  # what this slabench writes
    what: str  # in messages: "request record", "sweep summary", ...
    kindless_before_minor: int = 0  # files of a lower minor may lack `kind` (written before kinds were stamped)

    def stamp(self) -> dict[str, Any]:
        """The identifying fields every file of this schema starts with."""
        return {"kind": self.kind, "schema_version": self.major, "schema_minor": self.minor}

    def problem(self, data: Any) -> str | None:
        """Why `data` cannot be read as this schema (one line), or None when it can."""
        if not isinstance(data, Mapping):
            return f"not a slabench {self.what} (expected a JSON object, got {type(data).__name__})"
        minor = data.get("schema_minor")  # absent or null (a column missing from an older Parquet file): 0
        minor = 0 if minor is None else minor
        if not _is_int(minor) or minor < 0:
            return f"schema_minor {minor!r} is not a non-negative integer"
        kind = data.get("kind")
        if kind is None and minor >= self.kindless_before_minor:
            return f"no kind; a slabench {self.what} says kind: {self.kind} — is this the right file?"
        if kind is not None and kind != self.kind:
            return f"kind {kind!r} is not a slabench {self.what} ({self.kind}) — is this the right file?"
        version = data.get("schema_version")
        if version is None:
            return f"no schema_version; this slabench reads {self.kind} version {self.major}"
        if not _is_int(version):
            return f"schema_version {version!r} is not an integer major version (this slabench reads {self.major})"
        if version != self.major:
            return (
                f"{self.kind} schema_version {version}, but this slabench reads version {self.major} only (another "
                "major version renames or removes fields) — read it with the slabench release that wrote it"
            )
        return None

    def check(self, data: Any, source: str) -> None:
        if (why := self.problem(data)) is not None:
            raise UserError(f"{source}: {why}")

    def read_json(self, path: str | Path, missing_ok: bool = False) -> dict[str, Any] | None:
        """A JSON file of this schema, checked; None when it does not exist and `missing_ok`."""
        p = Path(path)
        if missing_ok and not p.exists():
            return None
        try:
            data = loads(read_text(p))  # NaN, Infinity and 1e999 refused: a figure is a finite number
        except json.JSONDecodeError as e:
            raise UserError(f"{p}:{e.lineno}: not valid JSON ({e.msg}); was it edited by hand?") from None
        except ValueError as e:
            raise UserError(f"{p}: not valid JSON ({e}); was it edited by hand?") from None
        self.check(data, str(p))  # a mapping of this schema, or it raises
        return dict(data)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# Every versioned file slabench reads back. Bump `minor` when a writer adds fields, `major` (and every reader) when a
# field is removed, renamed or changes meaning.
RECORD = FileSchema(
    "slabench.request_record", 1, 5, "request record", kindless_before_minor=1
)  # 2: stage_unit; 3: error_category bad_usage; 4: lost_events, stale_response; 5: first_answer_token, reasoning_*
RUN_STATUS = FileSchema(
    "slabench.run_status", 1, 5, "run status (run_status.json)", kindless_before_minor=1
)  # 2: saturation; 3: finished (false while the run goes on); 4: saturation.loop_*, cpu_wait_*; 5: saturated, stalls
# summary 2: typed; .1: level_unit; .2: records_sha256 per run, warmup_s, the measured level
SUMMARY = FileSchema("slabench.sweep_summary", 2, 2, "sweep summary (summary.json)")
# verdict minor 2: incomplete; 3: every cost line carries the whole estimate (typed: slabench.sla.verdict_file);
# 4: records_sha256 (the records it was computed from), the graded level's measured load
VERDICT = FileSchema("slabench.verdict", 1, 4, "SLA verdict (verdict.json)", kindless_before_minor=1)
SWEEP = FileSchema("slabench.sweep", 1, 0, "sweep record (sweep.json)")
SWEEP_RUN = FileSchema("slabench.sweep_run", 1, 1, "run manifest (manifest.json)")  # 1: prefix_cache
