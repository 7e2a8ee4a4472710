"""`slabench recover SPOOL...`: after a lost master, turn the workers' spools into the run's one records file.

    slabench recover .slabench-spool/<run-id>                      # every worker spool of that run
    slabench recover w1/.slabench-spool/<run-id> w2/... --out runs/<run-id>/records.parquet

Each worker journals every request it starts and every record it makes (`slabench.locust.spool`), and stops its load a
few seconds after it loses its master (``--master-lost-timeout``). This merges the journals — and the master's own
records file, if it exists at ``--out`` — into one records file with each request once: its record, or a
`lost_with_worker` stand-in (with its real request id) for a request that began and never got one. Beside it,
``run_status.json`` says the run is degraded (master lost) and reconciles the records with the server's request
count when the master's ``server_metrics.jsonl`` is there. The merged spool files are removed (``--keep-spools``
keeps them). Exit 0 when the file is written; grading the recovered run caps its verdict (degraded).
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path
from typing import Any

from slabench.core.errors import UserError
from slabench.core.record import RequestRecord
from slabench.core.sinks import open_sink, read_records
from slabench.evidence.accounting import Tally, incomplete_reasons, reconcile, server_received
from slabench.evidence.run_status import RunStatus, write_run_status
from slabench.evidence.scrape import FILE_NAME as SCRAPE_FILE
from slabench.evidence.scrape import read_scrapes
from slabench.locust.spool import JournalContents, read_journal, spool_files, unaccounted

STAND_IN_MESSAGE = "in flight when its worker stopped without its master; no record was made"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("recover", help="merge workers' spools into one records file after a lost master")
    p.add_argument("spools", nargs="+", help="spool files, or directories holding them (e.g. .slabench-spool/RUN_ID)")
    p.add_argument(
        "--out",
        default="",
        help="records file to write (.jsonl or .parquet; an existing one, e.g. the master's partial file, is merged "
        "in); default runs/<run-id>/records.jsonl",
    )
    p.add_argument("--keep-spools", action="store_true", help="leave the spool files in place")
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
        ids |= {row.get("run_id") for row in j.records} | {m.get("run_id") for m in j.began.values()}
    ids -= {"", None}
    if len(ids) > 1:
        raise UserError(
            f"the spools hold several runs ({', '.join(sorted(ids))}): recover one run at a time, "
            "e.g. slabench recover .slabench-spool/RUN_ID"
        )
    if not ids:
        raise UserError("the spools hold no records and no started requests: nothing to recover")
    return ids.pop()


def _write(records: list[RequestRecord], out: Path) -> None:
    """Write the merged file next to `out`, then swap it in (a failure leaves the old file as it was)."""
    tmp = out.with_name(out.stem + ".recovering" + out.suffix)
    if tmp.is_dir():
        shutil.rmtree(tmp)
    else:
        tmp.unlink(missing_ok=True)
    sink = open_sink(tmp)
    sink.write(sorted(records, key=lambda r: (r.wall_sent is None, r.wall_sent or 0.0)))
    sink.close()
    if out.is_dir():
        shutil.rmtree(out)
    os.replace(tmp, out)


def recover(paths: list[str], out: str = "", keep_spools: bool = False) -> dict[str, Any]:
    files = spool_files(paths)
    journals = [read_journal(f) for f in files]
    run_id = _run_id([], journals)
    out_path = Path(out or f"runs/{run_id}/records.jsonl")
    if out_path.suffix not in (".jsonl", ".ndjson", ".parquet"):
        raise UserError(f"--out {out_path}: use a .jsonl or .parquet path")
    existing = read_records(out_path) if out_path.exists() else []
    records, recovered, stand_ins = merge(journals, existing)
    _run_id(records, [])  # the master's file must be the same run
    out_path.parent.mkdir(parents=True, exist_ok=True)
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
    if not keep_spools:
        for f in files:
            f.unlink(missing_ok=True)
    return {**status, "out": str(out_path), "stand_ins": stand_ins}


def run(args: argparse.Namespace) -> int:
    s = recover(args.spools, args.out, args.keep_spools)
    print(
        f"slabench recover: {s['records']} records ({s['records_from_master_file']} from the master's file, "
        f"{s['records_from_spools']} from {len(s['recovered_from'])} spool file(s), {s['stand_ins']} stand-ins for "
        f"requests in flight) → {s['out']}; run_status.json: degraded (master lost)"
    )
    return 0
