"""The SLA contract's provisional status for the live tab: the records so far, graded exactly as the final grading
will grade them (`sla.single_run` estimates + `sla.grade`), labelled provisional. Pure: records and the loaded
contract in, a plain dict out.

Provisional because the run is not over: percentiles and rates move, a level may not have been reached yet, and a
quality task that has not been graded yet counts as "no data" here (the final grading treats a contract naming a task
the whole run never graded as a contract/run mismatch instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slabench.core.record import RequestRecord


def provisional_status(loaded: Any, records: Sequence[RequestRecord], unstaged_level: Any = None) -> dict[str, Any]:
    from slabench.sla.grade import fmt, grade
    from slabench.sla.single_run import levels_from_records

    levels = levels_from_records(records, unstaged_level)
    v = grade(loaded.contract, loaded.replica, levels, source="live records (provisional)", sla_file=str(loaded.path))
    return {
        "provisional": True,
        "records": len(records),
        "verdict": str(v.status),
        "summary": v.summary,
        "checks": [
            {
                "check": c.check,
                "status": str(c.status),
                "observed": fmt(c.observed, c.unit),
                "target": ("≤ " if c.direction == "max" else "≥ ") + fmt(c.target, c.unit),
                "reason": c.reason,
            }
            for c in v.checks
        ],
    }
