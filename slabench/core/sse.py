"""Incremental Server-Sent Events parser: bytes in (however they were split), events out, each stamped with the
time of the feed that completed it.

Follows the WHATWG event-stream rules that OpenAI-compatible servers use: lines end in CRLF, LF or CR; a line
starting with ':' is a comment (keep-alive); `data:` lines accumulate (joined by '\\n'); a blank line dispatches the
event; one leading space after the colon is dropped; a UTF-8 byte-order mark at the stream's start is dropped. Events
with no data are not dispatched. A line whose field name is none of SSE's is ignored, as SSE says, but counted
(`skipped`, the first kept in `first_skipped`): in an OpenAI stream such a line is an event lost (a BOM mid-stream,
`Data:`), and the client says so instead of losing it silently.

Bounded and linear: a line (or an event's accumulated data) longer than `max_event_bytes` raises `EventTooLong`
instead of growing without end, and the pieces of a long line are kept in a list and joined once, so a line that
arrives in a thousand reads costs a thousand appends, not a thousand ever-longer copies.
"""

from __future__ import annotations

from typing import NamedTuple

DEFAULT_MAX_EVENT_BYTES = 1 << 20  # 1 MiB: a chunk of an LLM stream is ~100–2,000 bytes
BOM = b"\xef\xbb\xbf"
_FIELDS = frozenset((b"id", b"retry"))  # SSE's other fields: no meaning for one request's stream


class EventTooLong(ValueError):
    """A line or an event exceeded the parser's limit (the stream is not an OpenAI-style event stream)."""


class SSEEvent(NamedTuple):  # a tuple: made per streamed token, in half a frozen dataclass's time
    data: str
    time: float
    event: str | None = None


class SSEParser:
    __slots__ = (
        "_data",
        "_data_len",
        "_event",
        "_head",
        "_partial",
        "_partial_len",
        "_pending_cr",
        "comments",
        "first_skipped",
        "max_bytes",
        "skipped",
    )

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self.max_bytes = max_event_bytes
        self._partial: list[bytes] = []  # the pieces of a line whose end has not arrived yet
        self._partial_len = 0
        self._data: list[str] = []
        self._data_len = 0
        self._event: str | None = None
        self._pending_cr = False  # the last byte seen was CR: a following LF belongs to the same line end
        self._head: bytes | None = b""  # the stream's first bytes until a BOM there is ruled out (then None)
        self.comments = 0  # keep-alive comment lines seen
        self.skipped = 0  # lines with a field name SSE does not know (ignored)
        self.first_skipped = b""

    def feed(self, chunk: bytes, now: float) -> list[SSEEvent]:
        if (  # one whole `data:` event in one read, nothing pending: what a server writes per token
            chunk[:6] == b"data: "
            and chunk[-2:] == b"\n\n"
            and chunk.count(b"\n") == 2
            and len(chunk) <= self.max_bytes
            and 0x0D not in chunk
            and not (
                self._partial or self._data or self._pending_cr or self._event is not None or self._head is not None
            )
        ):
            return [SSEEvent(chunk[6:-2].decode("utf-8", "replace"), now)]
        if self._head is not None:  # the stream's start: a BOM there is not part of the first line
            chunk = self._head + chunk
            if len(chunk) < len(BOM) and BOM.startswith(chunk):
                self._head = chunk
                return []
            self._head = None
            if chunk[:3] == BOM:
                chunk = chunk[3:]
        if self._pending_cr:
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return []
        self._pending_cr = chunk[-1] == 0x0D
        if 0x0D in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if b"\n" not in chunk:
            self._partial_len += len(chunk)
            if self._partial_len > self.max_bytes:
                raise EventTooLong(f"a line longer than {self.max_bytes:,} bytes")
            self._partial.append(chunk)
            return []
        *lines, rest = chunk.split(b"\n")
        if self._partial:
            self._partial.append(lines[0])
            lines[0] = b"".join(self._partial)
            self._partial = []
        if len(chunk) + self._partial_len > self.max_bytes and max(map(len, lines)) > self.max_bytes:
            raise EventTooLong(f"a line longer than {self.max_bytes:,} bytes")
        self._partial_len = len(rest)
        if rest:
            if self._partial_len > self.max_bytes:
                raise EventTooLong(f"a line longer than {self.max_bytes:,} bytes")
            self._partial.append(rest)
        out: list[SSEEvent] = []
        for line in lines:
            if not line:
                if self._data:
                    out.append(SSEEvent("\n".join(self._data), now, self._event))
                self._data = []
                self._data_len = 0
                self._event = None
            elif line[0] == 0x3A:  # ':'
                self.comments += 1
            else:
                self._field(line)
        return out

    def _field(self, line: bytes) -> None:
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data_len += len(value) + 1
            if self._data_len > self.max_bytes:
                raise EventTooLong(f"an event with more than {self.max_bytes:,} bytes of data")
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name not in _FIELDS:
            self.skipped += 1
            if not self.first_skipped:
                self.first_skipped = line[:80]

    @property
    def pending(self) -> bool:
        """Bytes or data lines received but not yet dispatched (a stream cut mid-event)."""
        return bool(self._partial or self._data or self._head)
