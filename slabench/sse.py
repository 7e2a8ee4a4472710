"""Incremental Server-Sent Events parser: bytes in (however they were split), events out, each stamped with the
time of the feed that completed it.

Follows the WHATWG event-stream rules that OpenAI-compatible servers use: lines end in CRLF, LF or CR; a line
starting with ':' is a comment (keep-alive); `data:` lines accumulate (joined by '\\n'); a blank line dispatches the
event; one leading space after the colon is dropped. Events with no data are not dispatched.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: str
    time: float
    event: str | None = None


class SSEParser:
    __slots__ = ("_buf", "_data", "_event", "_pending_cr", "comments")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[str] = []
        self._event: str | None = None
        self._pending_cr = False  # the last byte seen was CR: a following LF belongs to the same line end
        self.comments = 0  # keep-alive comment lines seen

    def feed(self, chunk: bytes, now: float) -> list[SSEEvent]:
        if (
            chunk.endswith(b"\n")
            and not self._buf
            and not self._pending_cr
            and chunk.find(b"\n") == len(chunk) - 1
            and b"\r" not in chunk
        ):  # one whole line, as the client feeds them (a line read per call): no buffering, no splitting
            return self._line(chunk[:-1], now)
        if not chunk:
            return []
        if self._pending_cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]
        self._pending_cr = chunk.endswith(b"\r")
        buf = self._buf + chunk
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *lines, self._buf = buf.split(b"\n")
        out: list[SSEEvent] = []
        for line in lines:
            out += self._line(line, now)
        return out

    def _line(self, line: bytes, now: float) -> list[SSEEvent]:
        if not line:
            out = [SSEEvent("\n".join(self._data), now, self._event)] if self._data else []
            self._data = []
            self._event = None
            return out
        if line[0] == 0x3A:  # ':'
            self.comments += 1
        else:
            self._field(line)
        return []

    def _field(self, line: bytes) -> None:
        name, sep, value = line.partition(b":")
        if sep and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value.decode("utf-8", "replace"))
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        # `id` and `retry` do not matter for a single request/response stream.

    @property
    def pending(self) -> bool:
        """Bytes or data lines received but not yet dispatched (a stream cut mid-event)."""
        return bool(self._buf or self._data)
