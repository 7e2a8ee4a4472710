"""`RequestRecord`: the one record every measured request becomes (docs/architecture.md, "The one record").

Raw timestamps only (monotonic `time.perf_counter()` seconds, plus one wall-clock anchor); every metric is derived in
`slabench.core.metrics`. Records are frozen and versioned (`kind`, `schema_version`, `schema_minor`: see
slabench.core.schema); the schema only gains fields, and a record of another major version, or one missing a required
field, is refused.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any

from slabench.core.boundary import field_types, row_problem
from slabench.core.schema import RECORD

SCHEMA_VERSION = RECORD.major
REQUIRED = ("run_id", "request_id", "outcome")  # never defaulted: a record without them is not one


class RecordError(ValueError):
    """A row that is not a record this slabench can read; the message is complete (the reader adds where)."""


class Outcome(enum.StrEnum):
    OK = "ok"
    ERROR = "error"  # the request failed (transport, HTTP status, protocol)
    INCOMPLETE = "incomplete"  # a stream that started but did not finish properly (cut, no usage)
    DROPPED = "dropped"  # never completed for a reason on our side: cancelled at stop, lost with a worker, not sent


class StageUnit(enum.StrEnum):
    """What a record's `stage_level` counts. A stored level is an integer, so a rate is kept in thousandths."""

    USERS = "users"  # concurrent users: the steps shape, a sweep's level
    MILLI_RPS = "milli_rps"  # thousandths of a request per second: the rate and diurnal shapes (2500 = 2.5 req/s)

    def stored(self, level: float) -> int:
        """A level in users or requests/s as this unit stores it."""
        return round(level * 1000) if self is StageUnit.MILLI_RPS else int(level)

    def load(self, stored: int) -> int | float:
        """A stored level back in users or requests/s (`load_unit`)."""
        return stored / 1000 if self is StageUnit.MILLI_RPS else stored

    @property
    def load_unit(self) -> str:
        return "req/s" if self is StageUnit.MILLI_RPS else "users"


def unit_before_stage_unit(scheduled: float | None) -> StageUnit:
    """The unit of a stage level in records written before `stage_unit` (minor < 2): only the open-loop rate and
    diurnal shapes set `scheduled`, and they stored rates in thousandths; every other level was users."""
    return StageUnit.MILLI_RPS if scheduled is not None else StageUnit.USERS


def stage_fields(level: float | None, unit: StageUnit | None, repeat: int | None, phase: str | None) -> dict[str, Any]:
    """A record's stage fields for a load of `level` users or requests/s (`unit` says which); the one writer."""
    if level is None or unit is None:
        return {"stage_level": None, "stage_unit": None, "stage_repeat": repeat, "stage_phase": phase}
    unit = StageUnit(unit)
    return {"stage_level": unit.stored(level), "stage_unit": str(unit), "stage_repeat": repeat, "stage_phase": phase}


class ErrorCategory(enum.StrEnum):
    CONNECT = "connect"  # refused, DNS, TLS handshake
    CLOSED = "closed"  # the connection closed or reset after the request was sent, before any response byte
    TIMEOUT = "timeout"  # no first byte in time, or the whole request over its limit
    STALL = "stall"  # the stream went silent mid-way for longer than the stall timeout
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    REDIRECT = "redirect"  # a 3xx not followed (not 307/308, another host, or too many hops); names the Location
    STREAM_CUT = "stream_cut"  # the connection was cut, or the response ended, before [DONE]
    NO_DONE = "no_done"  # the response ended cleanly after finish_reason and usage, but without [DONE]
    BAD_JSON = "bad_json"  # a data event that is not valid JSON
    NOT_OPENAI = "not_openai"  # 2xx but not an OpenAI-style SSE stream (content type or encoding, shape, size)
    STREAM_ERROR = "stream_error"  # the server sent an error event inside the stream
    NO_USAGE = "no_usage"  # stream finished without a usage chunk; token counts are estimates
    BAD_USAGE = "bad_usage"  # usage the answer cannot have (no count, over max_tokens, under the chunks): estimates
    LOST_EVENTS = "lost_events"  # the stream held lines that are no SSE field (skipped): events may be lost
    STALE_RESPONSE = "stale_response"  # the answer names another request of this client: not this request's answer
    CANCELLED = "cancelled"  # the user was stopped while the request was in flight
    LOST_WITH_WORKER = "lost_with_worker"
    NOT_SENT = "not_sent"
    CLIENT = "client"  # slabench itself failed on this response (a bug to report); the record keeps its timings


@dataclass(frozen=True, slots=True)
class RequestRecord:
    # identity
    run_id: str
    request_id: str
    worker_id: str = "local"
    user_id: str = ""
    account: str | None = None
    item_id: str | None = None
    stage_level: int | None = None  # the shape's load, counted in `stage_unit` (see `stage_fields`)
    stage_unit: str | None = None  # a `StageUnit`; read from records of minor < 2 by `unit_before_stage_unit`
    stage_repeat: int | None = None
    stage_phase: str | None = None
    endpoint: str = "chat"  # "chat" | "completions"
    model: str = ""
    # times: monotonic seconds (perf_counter), comparable within one host; wall_sent anchors them to UTC epoch
    wall_sent: float | None = None
    scheduled: float | None = None  # open loop: when the shape wanted it sent
    sent: float | None = None
    first_byte: float | None = None  # response headers arrived
    first_token: float | None = None  # first output chunk: answer, reasoning or tool call
    first_answer_token: float | None = None  # first visible answer (content or tool call), after any reasoning
    last_token: float | None = None
    end: float | None = None
    chunk_times: tuple[float, ...] = ()  # arrival of every content chunk (the first equals first_token)
    chunk_tokens: tuple[int, ...] | None = None  # tokens in each content chunk, when the server says
    # tokens
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None  # of completion_tokens, the reasoning's (see reasoning_source)
    reasoning_source: str | None = None  # "server" (usage) | "chunks" (reasoning chunks counted: a lower bound)
    token_source: str | None = None  # "server" (usage) | "estimate"
    max_tokens: int | None = None
    finish_reason: str | None = None
    # outcome
    outcome: Outcome = Outcome.OK
    error_category: ErrorCategory | None = None
    http_status: int | None = None
    error_message: str | None = None  # API keys and bearer tokens redacted
    retry_after: float | None = None  # seconds the server asked to wait (Retry-After on a 429/503)
    backoff: float | None = None  # seconds a closed-loop user waited after this request before its next one
    redirects: int | None = None  # 307/308 redirects followed (same method and body) to get this answer
    # quality (workload-specific; None when not graded)
    quality_task: str | None = None
    parse_ok: bool | None = None
    items_expected: int | None = None
    items_correct: int | None = None
    item_accuracy: float | None = None
    autofail_tp: int | None = None
    autofail_fp: int | None = None
    autofail_fn: int | None = None
    pass_agree: bool | None = None
    score_abs_error: float | None = None
    schema_version: int = SCHEMA_VERSION
    schema_minor: int = RECORD.minor
    kind: str = RECORD.kind

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in _FIELDS}
        d["chunk_times"] = list(self.chunk_times)
        if self.chunk_tokens is not None:
            d["chunk_tokens"] = list(self.chunk_tokens)
        d["outcome"] = str(self.outcome)
        if self.error_category is not None:
            d["error_category"] = str(self.error_category)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RequestRecord:
        """Inverse of to_dict. Raises RecordError for a row of another kind or major version, one missing a
        required field, or one that breaks the record boundary (`slabench.core.boundary`: types, finite numbers,
        non-negative counts, times in order). Fields of a newer minor version are ignored, and optional fields
        missing take their defaults; the record is then one of this slabench's schema (its own kind and version)."""
        if (why := RECORD.problem(d)) is not None:
            raise RecordError(why)
        missing = [k for k in REQUIRED if d.get(k) is None]
        if missing:
            raise RecordError(f"required field(s) {', '.join(missing)} missing — not a complete request record")
        if (why := row_problem(d, FIELD_TYPES)) is not None:
            raise RecordError(why)
        kw = {k: v for k, v in d.items() if k in _FIELD_NAMES and k not in _IDENTITY}
        kw["chunk_times"] = tuple(kw.get("chunk_times") or ())
        if kw.get("chunk_tokens") is not None:
            kw["chunk_tokens"] = tuple(int(x) for x in kw["chunk_tokens"])
        if kw.get("stage_level") is not None and kw.get("stage_unit") is None:
            kw["stage_unit"] = str(unit_before_stage_unit(kw.get("scheduled")))
        try:
            if kw.get("stage_unit") is not None:
                StageUnit(kw["stage_unit"])  # a unit this slabench does not know would misread the level
            kw["outcome"] = Outcome(kw["outcome"])
            if kw.get("error_category") is not None:
                kw["error_category"] = ErrorCategory(kw["error_category"])
        except ValueError as e:
            raise RecordError(f"not a valid record ({e})") from None
        return cls(**kw)

    @classmethod
    def from_row(cls, d: dict[str, Any]) -> tuple[RequestRecord, dict[str, Any]]:
        """`from_dict`, and the row to store for the record: `d` itself when it already is what `to_dict` gives (a
        row of this schema, every field and no other, nothing `from_dict` fills in), else `to_dict()`. A record that
        arrives as a row (a worker's batch) is then converted once, and written as it came."""
        record = cls.from_dict(d)
        own = d.keys() == _FIELD_NAMES and all(d[k] == v for k, v in _STAMP.items())
        if own and not (d["stage_level"] is not None and d["stage_unit"] is None):
            return record, d
        return record, record.to_dict()

    def replace(self, **changes: Any) -> RequestRecord:
        return dataclasses.replace(self, **changes)

    @classmethod
    def dropped(cls, category: ErrorCategory, message: str, **identity: Any) -> RequestRecord:
        """The record of a request that never ran to an answer here: not sent, or lost with its worker."""
        return cls(outcome=Outcome.DROPPED, error_category=category, error_message=message, **identity)


@dataclass(frozen=True, slots=True)
class RecordMeta:
    """Identity and schedule of one request, known before it goes out; each field is the record's of that name."""

    run_id: str
    worker_id: str = "local"
    user_id: str = ""
    account: str | None = None
    item_id: str | None = None
    stage_level: int | None = None
    stage_unit: str | None = None
    stage_repeat: int | None = None
    stage_phase: str | None = None
    scheduled: float | None = None
    request_id: str = ""  # set by the caller when it must name the request before it goes out (else a new one)

    def record_fields(self, request_id: str) -> dict[str, Any]:
        """This meta as `RequestRecord` keyword arguments, for the request named `request_id`."""
        return {**{name: getattr(self, name) for name in META_FIELDS}, "request_id": request_id}


META_FIELDS = tuple(f.name for f in dataclasses.fields(RecordMeta))
_FIELDS = dataclasses.fields(RequestRecord)
_FIELD_NAMES = frozenset(f.name for f in _FIELDS)
FIELD_TYPES = field_types(RequestRecord)
_STAMP = RECORD.stamp()
_IDENTITY = frozenset(_STAMP)
