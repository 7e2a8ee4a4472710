"""Records → per-request numpy arrays, fast enough for hundreds of thousands of records.

The per-request definitions are `slabench.core.metrics`' (TTFT = first_token − sent, or − scheduled in open loop;
E2E = end − sent; TPOT = (last_token − first_token) / (completion_tokens − 1); ITL = chunk gaps spread over the
tokens each chunk carried).
Building a `RequestRecord` per row and calling those functions costs ~40 µs a record; here the same formulas run
column-wise on Arrow data. `tests/unit/test_analysis_columns.py` checks, record by record, that both agree.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from numpy.typing import NDArray

from slabench.core.boundary import repeat_message, repeated_id, table_problem
from slabench.core.errors import UserError
from slabench.core.record import FIELD_TYPES, ErrorCategory, Outcome, RequestRecord, StageUnit
from slabench.core.schema import RECORD
from slabench.core.sinks import ARROW_SCHEMA, read_parquet, read_records
from slabench.evidence.run_status import Stall

COLUMNS = [
    "run_id",
    "worker_id",
    "user_id",
    "stage_level",
    "stage_unit",
    "stage_repeat",
    "stage_phase",
    "wall_sent",
    "scheduled",
    "sent",
    "first_token",
    "first_answer_token",
    "last_token",
    "end",
    "chunk_times",
    "chunk_tokens",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "outcome",
    "error_category",
    "quality_task",
    "parse_ok",
    "items_expected",
    "items_correct",
    "item_accuracy",
    "autofail_tp",
    "autofail_fn",
    "pass_agree",
]
EXCLUDED_PHASES = ("warmup", "cooldown")  # not steady state

Floats = NDArray[np.float64]
# A list column's (flat values, per-row lengths, per-row start offsets): float times or integer token counts.
ListParts = tuple[NDArray[Any], NDArray[np.int64], NDArray[np.int64]]


def with_stage_units(t: pa.Table) -> pa.Table:
    """Staged rows without a `stage_unit` (written before it) get the one `unit_before_stage_unit` gives."""
    if not {"stage_level", "stage_unit", "scheduled"} <= set(t.column_names):
        return t
    unit = t.column("stage_unit")
    missing = pc.and_(pc.is_valid(t.column("stage_level")), pc.is_null(unit))
    if not pc.any(missing).as_py():
        return t
    legacy = pc.if_else(pc.is_valid(t.column("scheduled")), str(StageUnit.MILLI_RPS), str(StageUnit.USERS))
    return t.set_column(t.column_names.index("stage_unit"), "stage_unit", pc.if_else(missing, legacy, unit))


def _not_this_schema(t: pa.Table) -> bool:
    """Some row is of another kind or major version, or lacks a required field (what RequestRecord.from_dict
    refuses), checked column-wise. An empty file (a run that made no request) has no row of another schema."""
    if t.num_rows == 0:
        return False
    if any(t.column(c).null_count for c in ("run_id", "request_id", "outcome", "schema_version")):
        return True
    if pc.any(pc.not_equal(t.column("schema_version"), RECORD.major)).as_py():
        return True
    minor = pc.fill_null(t.column("schema_minor"), 0)
    kind = t.column("kind")
    if pc.any(pc.less(minor, 0)).as_py() or pc.any(pc.not_equal(kind, RECORD.kind)).as_py():
        return True
    for name, values in (("stage_unit", StageUnit), ("outcome", Outcome), ("error_category", ErrorCategory)):
        if name in t.column_names:  # a value no enum of the record has (an outcome "12" was graded as not OK)
            col = t.column(name)
            if not pc.all(pc.or_(pc.is_null(col), pc.is_in(col, pa.array([str(v) for v in values])))).as_py():
                return True
    kindless = pc.is_null(kind)  # only rows written before kinds were stamped may lack one
    return bool(pc.any(pc.and_(kindless, pc.greater_equal(minor, RECORD.kindless_before_minor))).as_py())


def read_table(path: str | Path, columns: Sequence[str] = COLUMNS) -> pa.Table:
    """The records at `path` (.jsonl, or a .parquet file/directory) as an Arrow table of `columns` (by default
    what the figures need). Rows of another schema are refused (the record-by-record reader then names the first
    such line)."""
    p = Path(path)
    columns = list(columns)
    read = columns + [c for c in ARROW_SCHEMA.names if c not in columns]  # every field: one boundary for all
    schema = pa.schema([ARROW_SCHEMA.field(c) for c in read])
    if not p.exists():
        raise UserError(f"{p}: no such records file")
    try:
        if p.suffix == ".parquet":
            table = read_parquet(p, columns=read)
        elif p.stat().st_size == 0:
            return schema.empty_table().select(columns)
        else:
            opts = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
            data = p.read_bytes()
            if not data.isascii():  # Arrow does not check the keys it ignores: the record reader names a bad byte
                try:
                    data.decode("utf-8")
                except UnicodeDecodeError:
                    raise pa.ArrowInvalid("not UTF-8") from None
            table = pj.read_json(pa.BufferReader(data), parse_options=opts)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        # A run killed mid-write leaves a partial last line; the sink's reader knows how to skip exactly that
        # (and names the line of any other bad one, or of a row of another schema).
        rows = [r.to_dict() for r in read_records(p)]
        table = pa.Table.from_pylist(rows, schema=ARROW_SCHEMA)
    else:
        if _not_this_schema(table):
            read_records(p)  # raises, naming the line (or record) and what is wrong with it
            raise UserError(f"{p}: not slabench request records version {RECORD.major}")
        table = with_stage_units(table)
    _check_boundary(table, p)
    return table.select(columns)


def records_sha256(path: str | Path) -> str:
    """The content hash of a records file (a Parquet directory: of its files in name order): what a summary and a
    verdict say they were computed from, so a changed file is caught."""
    p = Path(path)
    h = hashlib.sha256()
    for f in sorted(p.rglob("*")) if p.is_dir() else [p]:
        if f.is_file():
            with f.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    h.update(chunk)
    return h.hexdigest()


def _check_boundary(table: pa.Table, path: Path) -> None:
    """The record boundary (`slabench.core.boundary`), column-wise: a row that breaks it, or a request with two
    records (counted twice: more samples than measured), is refused. A JSONL file's line is named by the
    record-by-record reader, which applies the same rules; a Parquet file's record by its number."""
    ids = table.column("request_id")
    problem = table_problem(table, FIELD_TYPES)
    repeat = repeated_id(ids.to_pylist()) if pc.count_distinct(ids).as_py() != len(ids) else None
    if problem is None and repeat is None:
        return
    if path.suffix != ".parquet":
        read_records(path)  # raises, naming the line
    if problem is not None:
        raise UserError(f"{path}: record {problem[0] + 1}: {problem[1]}")
    assert repeat is not None
    raise UserError(f"{path}: {repeat_message(repeat[0], [i + 1 for i in repeat[1]])}")


def table_from_records(records: Iterable[RequestRecord]) -> pa.Table:
    """Records already in memory (the Locust hook, the web UI) as the same Arrow table `read_table` gives."""
    return with_stage_units(pa.Table.from_pylist([r.to_dict() for r in records], schema=ARROW_SCHEMA)).select(COLUMNS)


def _f64(col: pa.ChunkedArray | pa.Array) -> Floats:
    """A numeric or boolean column as float64 with NaN for null."""
    out: Floats = col.cast(pa.float64()).to_numpy(zero_copy_only=False)  # pyarrow has no stubs
    return out


def _str(col: pa.ChunkedArray | pa.Array) -> NDArray[np.object_]:
    return np.asarray(col.to_pylist(), dtype=object)


def _list_parts(col: pa.ChunkedArray) -> ListParts:
    """(flat values, per-row lengths, per-row start offsets into flat) of a list column; null lists are empty."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    lengths = pc.fill_null(pc.list_value_length(arr), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = arr.flatten().to_numpy(zero_copy_only=False)
    starts = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    return flat, lengths, starts


def itl_arrays(chunk_times: pa.ChunkedArray, chunk_tokens: pa.ChunkedArray) -> tuple[Floats, Floats]:
    """(one ITL value per token over all rows, mean ITL per row with NaN where a row has no gap): the column-wise
    form of `slabench.core.metrics.itl` / `mean_itl`."""
    return itl_from_parts(_list_parts(chunk_times), _list_parts(chunk_tokens))


def record_itl(r: RequestRecord) -> Floats:
    """`itl_arrays` for one record (the live view's, per record as it arrives): `metrics.itl(r)` in numpy."""
    times = np.asarray(r.chunk_times, dtype=float)
    tokens = np.asarray(r.chunk_tokens or (), dtype=np.int64)
    one = np.zeros(1, dtype=np.int64)
    return itl_from_parts((times, np.array([times.size]), one), (tokens, np.array([tokens.size]), one))[0]


def itl_from_parts(times: ListParts, tokens: ListParts) -> tuple[Floats, Floats]:
    """`itl_arrays` on the (flat values, lengths, starts) of the chunk-time and chunk-token lists."""
    flat, lengths, starts = times
    n = len(lengths)
    if flat.size == 0:
        return np.empty(0), np.full(n, np.nan)
    # has_gap[j]: element j is a chunk after its row's first, so flat[j] − flat[j − 1] is one of its row's gaps
    has_gap = np.ones(flat.size, dtype=bool)
    has_gap[starts[lengths > 0]] = False
    gaps = np.diff(flat)[has_gap[1:]]
    tk_flat, tk_len, tk_start = tokens
    if np.array_equal(tk_len, lengths):  # the usual case: a token count for every chunk
        k = np.maximum(tk_flat[has_gap], 1).astype(np.int64)
    elif not tk_len.any():  # no counts at all: one token per chunk
        k = np.ones(gaps.size, dtype=np.int64)
    else:  # some rows have fewer counts than chunks: missing ones count as 1
        pos = np.arange(flat.size) - np.repeat(starts, lengths)
        row = np.repeat(np.arange(n), lengths)
        gap_row, gap_pos = row[has_gap], pos[has_gap]
        known = gap_pos < tk_len[gap_row]
        k = np.ones(gaps.size, dtype=np.int64)
        k[known] = tk_flat[tk_start[gap_row[known]] + gap_pos[known]]
        k = np.maximum(k, 1)
    per_token = gaps / k
    if (k != 1).any():
        per_token = np.repeat(per_token, k)
    # Per row: Σ gaps = last chunk − first chunk; Σ k over the row's gap elements via a cumulative sum.
    gap_counts = np.maximum(lengths - 1, 0)
    ends = np.cumsum(gap_counts)
    ksum = np.concatenate(([0], np.cumsum(k)))
    tok_sum = ksum[ends] - ksum[ends - gap_counts]
    last = np.where(lengths > 0, flat[np.minimum(starts + lengths - 1, flat.size - 1)], np.nan)
    first = np.where(lengths > 0, flat[np.minimum(starts, flat.size - 1)], np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(tok_sum > 0, (last - first) / np.where(tok_sum > 0, tok_sum, 1), np.nan)
    return per_token, mean


@dataclass
class RunArrays:
    """What one run contributes after warm-up exclusion. Latency arrays hold OK requests only."""

    records: int  # rows in the run
    excluded_warmup: int  # rows left out as warm-up (or cool-down)
    warmup_rule: str  # "phase" | "time:<seconds>" | "none"
    counted: int  # rows after exclusion
    dropped: int  # counted rows with outcome `dropped` (ours: cancelled at stop, not sent, lost)
    ok: int
    stalled: int  # counted requests in flight while their load generator was frozen: no latency figure uses them
    errors: int
    incomplete: int
    error_counts: dict[str, int]  # non-OK counted rows by error category (or outcome when uncategorised)
    window_start: float | None  # send time of the first counted request (wall-clock s when known)
    window_end: float | None  # end time of the last counted request
    # per OK request not stalled (as every latency array), NaN where missing: user-visible (from `scheduled` in open
    # loop, else `sent`)
    ttft: Floats
    ttft_sent: Floats | None  # open loop only: TTFT from when the request actually went out
    e2e: Floats
    tpot: Floats
    itl_mean: Floats
    itl_tokens: Floats  # one value per token over OK requests
    output_tokens: float  # Σ completion tokens of OK requests
    ok_without_tokens: int  # OK requests whose token counts are missing (then token rates are not computed)
    total_tokens: float  # Σ prompt + completion tokens of OK requests
    quality: dict[str, dict[str, Floats]]  # task → column → values over counted rows of that task
    users_held: int | None = None  # the most users active over at least half the window (None: records name none)
    sends: int = 0  # counted requests that went out
    send_span_s: float = 0.0  # from the first of them to the last
    ttft_answer: Floats | None = None  # per OK request, to the first answer token (NaN: records before minor 5)
    cached_tokens: float = 0.0  # Σ prefix-cached prompt tokens of OK requests whose server said (usage)
    cached_of_prompt: float = 0.0  # Σ prompt tokens of those same requests

    @property
    def duration_s(self) -> float | None:
        if self.window_start is None or self.window_end is None:
            return None
        d = self.window_end - self.window_start
        return d if d > 0 else None


_QUALITY_COLS = ("parse_ok", "items_expected", "items_correct", "item_accuracy", "autofail_tp", "autofail_fn")


def wall_offsets(worker: NDArray[np.object_], wall: Floats, sent: Floats) -> Floats:
    """Per row, its worker's offset from the monotonic clock to the wall clock (median of wall_sent − sent over the
    worker's anchored rows). Monotonic clocks are per process, so each worker converts with its own offset; rows of
    a worker with no anchor at all get NaN — unless the run has a single worker, whose one clock needs no
    conversion (offset 0)."""
    offsets = np.full(worker.size, np.nan)
    worker = worker.astype(str)
    names = np.unique(worker)
    for name in names:
        rows = worker == name
        d = (wall - sent)[rows]
        d = d[~np.isnan(d)]
        if d.size:
            offsets[rows] = float(np.median(d))
    if names.size == 1 and np.isnan(offsets).all():
        offsets[:] = 0.0
    return offsets


def request_times(table: pa.Table) -> dict[str, Floats]:
    """Per row, in seconds, NaN where a row has no value: `ttft` (what the user waited: from `scheduled` in open
    loop, else from `sent`), `ttft_answer` (to the first answer token, after any reasoning; from the same start),
    `ttft_sent`, `e2e`, `tpot`, `lateness` — the column-wise form of
    `slabench.core.metrics`."""
    sent, end, scheduled = _f64(table.column("sent")), _f64(table.column("end")), _f64(table.column("scheduled"))
    first, last = _f64(table.column("first_token")), _f64(table.column("last_token"))
    answer = _f64(table.column("first_answer_token"))
    completion = _f64(table.column("completion_tokens"))
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(completion >= 2, (last - first) / (completion - 1), np.nan)
    start = np.where(np.isnan(scheduled), sent, scheduled)
    return {
        "ttft": first - start,
        "ttft_answer": answer - start,
        "ttft_sent": first - sent,
        "e2e": end - sent,
        "tpot": tpot,
        "lateness": sent - scheduled,
    }


def stalled_rows(table: pa.Table, stalls: Sequence[Stall]) -> NDArray[np.bool_]:
    """Rows in flight — from their schedule (open loop) or send to their end — while their process was frozen."""
    out = np.zeros(table.num_rows, dtype=bool)
    if not stalls:
        return out
    worker = _str(table.column("worker_id")).astype(str)
    sent, scheduled, end = _f64(table.column("sent")), _f64(table.column("scheduled")), _f64(table.column("end"))
    begin = np.where(np.isnan(scheduled), sent, scheduled)
    with np.errstate(invalid="ignore"):
        for st in stalls:
            out |= (worker == st.worker) & (begin < st.end) & (end > st.start)
    return out


def users_held(user: NDArray[np.object_], start: Floats, end: Floats) -> int | None:
    """The most users active over at least half of the window they span: a user is active from its first request's
    send to its last request's end. A closed-loop level whose users were not all spawned, or stopped, in most of its
    window holds fewer than it was configured with. None when the rows name no user (records not made by Locust)."""
    named = (user != None) & (user != "") & ~np.isnan(start) & ~np.isnan(end)  # noqa: E711 ("": a record's default)
    if not named.any():
        return None
    ids, which = np.unique(user[named].astype(str), return_inverse=True)
    first = np.full(ids.size, np.inf)
    last = np.full(ids.size, -np.inf)
    np.minimum.at(first, which, start[named])
    np.maximum.at(last, which, end[named])
    times = np.concatenate([first, last])
    order = np.argsort(times, kind="stable")
    active = np.cumsum(np.concatenate([np.ones(ids.size), -np.ones(ids.size)])[order])[:-1]
    spans = np.diff(times[order])
    total = float(spans.sum())
    if total <= 0:
        return int(ids.size)
    by_count = np.argsort(-active, kind="stable")  # the highest counts first: time held at ≥ each count
    reach = np.cumsum(spans[by_count])
    return int(active[by_count][np.searchsorted(reach, total / 2)])


def run_arrays(table: pa.Table, warmup_s: float = 0.0, stalls: Sequence[Stall] = ()) -> RunArrays:
    """Per-request arrays of one run. Warm-up: rows whose stage_phase is warmup/cooldown when the run's records
    carry phases; otherwise rows sent in the first `warmup_s` seconds after the run's first request. Rows in flight
    during one of `stalls` (run_status.json's) are counted, and left out of every latency array."""
    n = table.num_rows
    phase = table.column("stage_phase")
    sent = _f64(table.column("sent"))
    end = _f64(table.column("end"))
    scheduled = _f64(table.column("scheduled"))
    # One clock for the whole run: a record's own wall anchor, else its worker's offset (never another worker's).
    wall = _f64(table.column("wall_sent"))
    unanchored = np.isnan(wall)
    t_send = wall.copy()
    if unanchored.any():
        t_send[unanchored] = (sent + wall_offsets(_str(table.column("worker_id")), wall, sent))[unanchored]
    t_end = t_send + (end - sent)
    if phase.null_count < n:
        keep = ~np.isin(_str(phase), EXCLUDED_PHASES)
        rule = "phase"
    elif warmup_s > 0 and n > 0 and not np.isnan(t_send).all():
        with np.errstate(invalid="ignore"):
            keep = ~(t_send < np.nanmin(t_send) + warmup_s)
        rule = f"time:{warmup_s:g}"
    else:
        keep = np.ones(n, dtype=bool)
        rule = "none"
    # Scalar columns go to numpy and are masked there; the big list columns are filtered once, to the OK rows.
    t = table.drop_columns(["chunk_times", "chunk_tokens"]).filter(pa.array(keep))
    t_send, t_end, sent, end, scheduled = t_send[keep], t_end[keep], sent[keep], end[keep], scheduled[keep]
    outcome_all = _str(table.column("outcome"))
    stalled_all = stalled_rows(table, stalls)
    outcome = outcome_all[keep]
    stalled = stalled_all[keep]
    category = _str(t.column("error_category"))
    ok = outcome == "ok"
    measured = ok & ~stalled  # what the latency figures are made of
    not_ok = ~ok
    keys = np.where(category[not_ok] == None, outcome[not_ok], category[not_ok])  # noqa: E711 (object array)
    error_counts: dict[str, int] = {}
    if keys.size:
        labels, counts = np.unique(keys.astype(str), return_counts=True)
        error_counts = {str(k): int(v) for k, v in zip(labels, counts, strict=True)}
    times = request_times(t)
    completion, prompt = _f64(t.column("completion_tokens")), _f64(t.column("prompt_tokens"))
    tok_ok = table.select(["chunk_times", "chunk_tokens"]).filter(pa.array(keep & (outcome_all == "ok") & ~stalled_all))
    itl_tokens, itl_mean = itl_arrays(tok_ok.column("chunk_times"), tok_ok.column("chunk_tokens"))
    cached = _f64(t.column("cached_tokens"))
    said = ok & ~np.isnan(cached) & ~np.isnan(prompt)  # requests whose usage gave the cached prompt tokens
    has_end = ~np.isnan(t_end)
    went = t_send[~np.isnan(t_send)]
    open_loop = bool((~np.isnan(scheduled[ok])).any())
    quality: dict[str, dict[str, Floats]] = {}
    tasks = _str(t.column("quality_task"))
    for task in sorted({x for x in tasks if x is not None}):
        sel = pa.array(tasks == task)
        sub = t.filter(sel)
        quality[task] = {c: _f64(sub.column(c)) for c in _QUALITY_COLS}
        quality[task]["pass_agree"] = _f64(sub.column("pass_agree"))
    return RunArrays(
        records=n,
        excluded_warmup=int(n - keep.sum()),
        warmup_rule=rule,
        counted=t.num_rows,
        dropped=int((outcome == "dropped").sum()),
        ok=int(ok.sum()),
        stalled=int(stalled.sum()),
        errors=int((outcome == "error").sum()),
        incomplete=int((outcome == "incomplete").sum()),
        error_counts=error_counts,
        window_start=float(np.nanmin(t_send)) if t.num_rows and not np.isnan(t_send).all() else None,
        window_end=float(np.max(t_end[has_end])) if has_end.any() else None,
        ttft=times["ttft"][measured],
        ttft_sent=times["ttft_sent"][measured] if open_loop else None,
        ttft_answer=times["ttft_answer"][measured],
        cached_tokens=float(cached[said].sum()),
        cached_of_prompt=float(prompt[said].sum()),
        e2e=times["e2e"][measured],
        tpot=times["tpot"][measured],
        itl_mean=itl_mean,
        itl_tokens=itl_tokens,
        output_tokens=float(np.nansum(completion[ok])),
        ok_without_tokens=int((np.isnan(completion[ok]) | np.isnan(prompt[ok])).sum()),
        total_tokens=float(np.nansum(completion[ok]) + np.nansum(prompt[ok])),
        quality=quality,
        users_held=users_held(_str(t.column("user_id")), t_send, t_end),
        sends=int(went.size),
        send_span_s=float(went.max() - went.min()) if went.size else 0.0,
    )
