"""A `summary.json` is a cache of its records, never evidence of its own: `recheck` recomputes it from the records
beside it (with the options it was aggregated with) and refuses it, with one line naming what and how to fix it, when
they no longer agree — a run added, removed or run again (stale), a records file changed since (its sha256), or a
figure that is not what the records give (edited). What is graded is the recomputed summary.

A summary written before minor 2 carries neither the hashes nor its warm-up option, so it cannot be checked: refused,
asking for `slabench aggregate` again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slabench.analysis.aggregate import aggregate
from slabench.analysis.summary import RunSummary, SweepSummary, load_summary, summary_json
from slabench.core.errors import UserError

CHECKED_SINCE_MINOR = 2  # summaries from this minor on carry what a check needs


def _runs(summary: SweepSummary) -> dict[tuple[float, int], RunSummary]:
    return {(float(lv.level), r.repeat): r for lv in summary.levels for r in lv.runs}


def _records_root(path: Path, stored: SweepSummary) -> Path:
    """What to aggregate again: the folder of summary.json (a sweep tree, or a stepped records file in it), else what
    the summary says it aggregated (`source`: a summary written elsewhere with --out)."""
    folder = path.parent
    files = {Path(r.path).name for lv in stored.levels for r in lv.runs}
    if len(files) == 1 and (folder / next(iter(files))).is_file():  # a stepped records file beside it
        return folder / next(iter(files))
    holds_runs = any(d.is_dir() and d.name.isdigit() for d in folder.iterdir())
    if not holds_runs and Path(stored.source).exists() and Path(stored.source).resolve() != folder.resolve():
        return Path(stored.source)
    return folder


def _first_difference(old: Any, new: Any, where: str) -> str | None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(k for k in new if k not in old)]:
            if key == "path":  # where the records were read from: the same file, seen from another folder
                continue
            diff = _first_difference(old.get(key), new.get(key), f"{where}.{key}" if where else str(key))
            if diff is not None:
                return diff
        return None
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            if (diff := _first_difference(a, b, f"{where}[{i}]")) is not None:
                return diff
        return None
    return None if old == new else f"{where} is {_short(old)}, the records give {_short(new)}"


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:39] + "…"


def recheck(path: str | Path) -> SweepSummary:
    """The summary at `path`, recomputed from its records after checking that it is theirs; raises UserError."""
    p = Path(path)
    stored = load_summary(p)
    root = _records_root(p, stored)
    again = f"run `slabench aggregate {root}` again (with the options you used), then grade"
    if stored.schema_minor < CHECKED_SINCE_MINOR:
        raise UserError(
            f"{p}: written by an older slabench (summary minor {stored.schema_minor}) without the sha256 of its "
            f"records, so its figures cannot be checked against them; {again}"
        )
    try:
        fresh = aggregate(root, slo=stored.slo, warmup_s=stored.warmup_s)
    except UserError as e:
        raise UserError(
            f"{p}: a summary is a cache of its records, and they cannot be read again ({e}) — grade the sweep "
            "directory or records file it was aggregated from"
        ) from None
    old, new = _runs(stored), _runs(fresh)
    both = old.keys() & new.keys()
    changed = sorted(k for k in old.keys() | new.keys() if k not in both or old[k].run_id != new[k].run_id)
    if changed:
        level, repeat = changed[0]
        raise UserError(
            f"{p}: its runs are not the finished runs beside it (run {fresh.label(level)} repeat {repeat} is in one "
            f"and not the other) — the sweep changed after it was aggregated; {again}"
        )
    for key, run in new.items():
        if old[key].records_sha256 != run.records_sha256:
            raise UserError(
                f"{p}: {run.path} changed since it was aggregated (sha256 {str(old[key].records_sha256)[:12]}… in "
                f"the summary, {str(run.records_sha256)[:12]}… on disk); {again}"
            )
    before, after = json.loads(summary_json(stored)), json.loads(summary_json(fresh))
    diff = _first_difference(before["levels"], after["levels"], "levels")
    if diff is not None:
        raise UserError(f"{p}: {diff} — the summary was edited, or written by another tool; {again}")
    return fresh
