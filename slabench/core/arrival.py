"""When a stream's bytes arrived, not when the event loop got round to them: the kernel's receive timestamp.

A worker carries hundreds of streams in one gevent loop; when many streams' events arrive in the same wake-up, each
waits its turn, and a stamp taken when the loop reads the socket counts that wait as the server's time (the TTFT
error's tail at scale). Linux stamps every received packet for a socket that asks (`SO_TIMESTAMPNS`); `recvmsg`
returns the stamp of the last packet it read, on the wall clock. `arrival` turns it into the record's clock (now
minus the bytes' age), held between the stream's previous arrival and the notice; without a stamp (another OS, TLS
sockets, the first packets after the kernel turns stamping on) the arrival is the notice, as before.

What it cannot undo: TCP merges packets that wait in a socket's queue, and the merged packet keeps the newest stamp.
A wait shorter than the gap between a stream's packets (the contention of one busy wake-up) is taken out; bytes that
waited while the stream's next packet came (a process frozen longer than that, by the machine or a GC) are stamped
as that next packet, between their arrival and the notice.
"""

from __future__ import annotations

import socket
import struct
import sys

# Linux's SO_TIMESTAMPNS (the same number for SCM_TIMESTAMPNS); Python's socket module does not name it. Other
# systems give the option another meaning or none: there the stamp is the loop's notice.
SO_TIMESTAMPNS = 35
SUPPORTED = sys.platform == "linux"
_TIMESPEC = struct.Struct("qq")  # struct timespec on 64-bit Linux: seconds, nanoseconds
_ANCILLARY = socket.CMSG_SPACE(_TIMESPEC.size) if SUPPORTED else 0


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp the packets this socket receives; False where it cannot."""
    if not SUPPORTED:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def recv_stamped(sock: socket.socket, n: int) -> tuple[bytes, int | None]:
    """Up to `n` bytes, and the wall-clock nanoseconds the kernel received the last packet of them at (None when it
    did not say)."""
    data, ancillary, _flags, _addr = sock.recvmsg(n, _ANCILLARY)
    return data, _stamp(ancillary)


def _stamp(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(payload)
            return int(sec) * 1_000_000_000 + int(nsec)
    return None


def arrival(now: float, wall_ns: int, stamp_ns: int | None, floor: float) -> float:
    """On the record's clock, when bytes the kernel stamped at `stamp_ns` arrived, read at `now` (the record's clock)
    = `wall_ns` (the wall clock): `now` minus their age, held within [`floor`, `now`] — `floor` being when the
    response's head arrived, or the stream's previous arrival: an arrival is never later than its notice, never
    before the request went out, and a stream's arrivals stay in order (a wall clock step between the packet and the
    read cannot break either). `now` itself without a stamp."""
    if stamp_ns is None:
        return now
    return min(now, max(floor, now - (wall_ns - stamp_ns) * 1e-9))
