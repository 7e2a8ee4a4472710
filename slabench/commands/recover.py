"""`slabench recover SPOOL...`: after a lost master, turn the workers' spools into the run's one records file.

    slabench recover .slabench-spool/<run-id>                      # every worker spool of that run
    slabench recover w1/.slabench-spool/<run-id> w2/... --out runs/<run-id>/records.parquet

Each worker journals every request it starts and every record it makes (`slabench.locust.spool`), and stops its load a
few seconds after it loses its master (``--master-lost-timeout``). This merges the journals — and the master's own
records file, if it exists at ``--out`` — into one records file with each request once: its record, or a
`lost_with_worker` stand-in (with its real request id) for a request that began and never got one. Beside it,
``run_status.json`` says the run is degraded (master lost) and reconciles the records with the server's request
count when the master's ``server_metrics.jsonl`` is there.

Nothing is lost on the way: the merged file is written beside ``--out`` under a temporary name, flushed to disk
(fsync) and renamed over it, then read back and checked (each request id once, as many as merged). Only then, and
only with ``--remove-spools``, are the spool files removed — never the file written, never a plain records file
(one without a journal's ``began`` lines). Exit 0 when the file is written and verified; 3 when ``--out`` cannot be
written (one line, nothing changed); 4 when the file read back is not what was written (the spools and the earlier
file are kept). Grading the recovered run caps its verdict (degraded).
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

from slabench.core.errors import MeasurementIncomplete, UserError
from slabench.core.files import check_output
from slabench.core.record import RequestRecord
from slabench.core.run_id import check_run_id
from slabench.core.sinks import JsonlSink, ParquetSink, RecordSink, read_records
from slabench.evidence.accounting import Tally, incomplete_reasons, reconcile, server_received
from slabench.evidence.run_status import RunStatus, write_run_status
from slabench.evidence.scrape import FILE_NAME as SCRAPE_FILE
from slabench.evidence.scrape import read_scrapes
from slabench.locust.spool import Journal, JournalContents, read_journal, spool_files, unaccounted

STAND_IN_MESSAGE = "in flight when its worker stopped without its master; no record was made"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("recover", help="merge workers' spools into one records file after a lost master")
    p.add_argument("spools", nargs="+", help="spool files, or directories holding them (e.g. .slabench-spool/RUN_ID)")
    p.add_argument(
        "--out",
        default="",
        help="records file to write (.jsonl or .parquet; an existing one, e.g. the master's partial file, is merged "
        "in); default runs/<run-id>/records.jsonl",
    )
    p.add_argument(
        "--remove-spools",
        action="store_true",
        help="remove the spool files once the merged file is written and read back whole (default: keep them)",
    )
    p.add_argument("--keep-spools", action="store_true", help=argparse.SUPPRESS)  # the default now; old scripts
    p.set_defaults(func=run)


def merge(journals: list[JournalContents], existing: list[RequestRecord]) -> tuple[list[RequestRecord], int, int]:
    """Every request once: the existing records, then each journal's records and stand-ins for its requests that
    began without a record. Returns (records, recovered from spools, stand-ins)."""
    out = list({r.request_id: r for r in existing}.values())
    known = {r.request_id for r in out}
    recovered = stand_ins = 0
    everything = JournalContents()
    for j in journals:
        everything.records += j.records
        everything.began.update(j.began)
    records, lost = unaccounted(everything, known, STAND_IN_MESSAGE)
    for r in records:
        if r.request_id not in known:  # a record in two spools (copied by hand) counts once
            known.add(r.request_id)
            out.append(r)
            recovered += 1
    out += lost
    stand_ins = len(lost)
    return out, recovered, stand_ins


def _run_id(records: list[RequestRecord], journals: list[JournalContents]) -> str:
    ids = {r.run_id for r in records}
    for j in journals:
        found = [row.get("run_id") for row in j.records] + [m.get("run_id") for m in j.began.values()]
        ids |= {i for i in found if isinstance(i, str)}  # the record boundary let only strings (or none) through
    ids -= {""}
    if len(ids) > 1:
        raise UserError(
            f"the spools hold several runs ({', '.join(sorted(ids))}): recover one run at a time, "
            "e.g. slabench recover .slabench-spool/RUN_ID"
        )
    if not ids:
        raise UserError("the spools hold no records and no started requests: nothing to recover")
    return ids.pop()


def _write(records: list[RequestRecord], out: Path) -> None:
    """Write the merged file beside `out` and fsync it, then swap it in. The file it replaces (the master's partial
    records, already merged) moves aside and goes only once the new one is read back whole; any failure leaves `out`
    as it was."""
    tmp, aside = out.with_name(f".{out.name}.recovering"), out.with_name(f".{out.name}.replaced")
    try:
        for leftover in (tmp, aside):
            _remove(leftover)
        sink: RecordSink = ParquetSink(tmp) if out.suffix == ".parquet" else JsonlSink(tmp)
        sink.write(sorted(records, key=lambda r: (r.wall_sent is None, r.wall_sent or 0.0)))
        sink.close()
        _fsync(tmp)
        if out.exists():
            os.replace(out, aside)
        os.replace(tmp, out)
        _fsync(out.parent)
    except OSError as e:
        if aside.exists() and not out.exists():
            os.replace(aside, out)
        _remove(tmp)
        raise UserError(
            f"--out {out}: cannot write the merged records ({e.strerror or e}); nothing was changed or removed — "
            "choose a writable --out"
        ) from None
    _verify(out, records, aside)
    _remove(aside)


def _verify(out: Path, records: list[RequestRecord], aside: Path) -> None:
    """The file on disk holds each merged request once, no more, no fewer."""
    back = Counter(r.request_id for r in read_records(out))
    want = Counter(r.request_id for r in records)
    if back != want:
        kept = f"; the file it replaced is at {aside}" if aside.exists() else ""
        raise MeasurementIncomplete(
            f"--out {out}: read back {sum(back.values())} records where {len(records)} were written (the disk "
            f"lost or changed some); the spools are kept{kept} — run slabench recover again"
        )


def _fsync(path: Path) -> None:
    """A file, or a folder and the files in it (a Parquet records directory), on disk now."""
    for p in [*sorted(path.iterdir()), path] if path.is_dir() else [path]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def recover(paths: list[str], out: str = "", remove_spools: bool = False) -> dict[str, Any]:
    found = [f for f in spool_files(paths) if f.name != SCRAPE_FILE]  # the master's scrape log, beside its records
    contents = {f: read_journal(f) for f in found}
    run_id = _run_id([], list(contents.values()))
    out_path = Path(out) if out else Path("runs") / check_run_id(run_id, "the spools' run id") / "records.jsonl"
    if out_path.suffix not in (".jsonl", ".ndjson", ".parquet"):
        raise UserError(f"--out {out_path}: use a .jsonl or .parquet path")
    check_output(out_path, "--out", is_dir=out_path.suffix == ".parquet")
    target = out_path.resolve()
    files = [f for f in found if f.resolve() != target]  # the master's file at --out is merged below, not a spool
    journals = [contents[f] for f in files]
    existing = read_records(out_path) if out_path.exists() else []
    records, recovered, stand_ins = merge(journals, existing)
    _run_id(records, [])  # the master's file must be the same run
    _write(records, out_path)
    tally = Tally()
    tally.add(records)
    status: dict[str, Any] = {
        "run_id": run_id,
        "records": tally.records,
        "outcomes": dict(tally.outcomes),
        "master_lost": True,
        "recovered_from": [str(f) for f in files],
        "records_from_master_file": len(existing),
        "records_from_spools": recovered,
        "lost_workers": {},
        "workers_without_final_batch": [],
        "accounting": reconcile(tally, server_received(read_scrapes(out_path.parent / SCRAPE_FILE, run_id))),
    }
    status["incomplete_reasons"] = incomplete_reasons(tally, status)
    status["degraded"] = True
    write_run_status(out_path.parent, RunStatus(**status))  # the one writer: kind and version stamped
    removed = []
    if remove_spools:  # the merged file is on disk and verified; a plain records file is no spool and stays
        removed = [f for f, j in zip(files, journals, strict=True) if j.began]
        for f in removed:
            Journal.remove_file(f)
    return {**status, "out": str(out_path), "stand_ins": stand_ins, "removed": len(removed)}


def run(args: argparse.Namespace) -> int:
    s = recover(args.spools, args.out, args.remove_spools)
    spools = f"{s['removed']} spool file(s) removed" if args.remove_spools else "spools kept (--remove-spools)"
    print(
        f"slabench recover: {s['records']} records ({s['records_from_master_file']} from the master's file, "
        f"{s['records_from_spools']} from {len(s['recovered_from'])} spool file(s), {s['stand_ins']} stand-ins for "
        f"requests in flight) → {s['out']}, written and read back whole; {spools}; run_status.json: degraded "
        "(master lost)"
    )
    return 0
