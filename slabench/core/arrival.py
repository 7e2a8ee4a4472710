"""When a stream's bytes arrived, not when the event loop got round to them: the kernel's receive timestamp.

A worker carries hundreds of streams in one gevent loop; when many streams' events arrive in the same wake-up, each
waits its turn, and a stamp taken when the loop reads the socket counts that wait as the server's time (the TTFT
error's tail at scale). Linux stamps every received packet for a socket that asks (`SO_TIMESTAMPNS`); `recvmsg`
returns the stamp of the last packet it read, on the wall clock. `arrival` turns it into the record's clock (now
minus the bytes' age), held between the stream's previous arrival and the notice; without a stamp (another OS, TLS
sockets, the first packets after the kernel turns stamping on) the arrival is the notice, as before.

TCP merges packets that wait in a socket's queue, and the merged packet keeps the newest stamp: bytes that waited
while the stream's next packet came (a loop busier than the gap between a stream's packets) would be stamped as
that next packet. So a `Watcher` — one native thread per process, outside the event loop — is told of each packet
that arrives on an armed socket (epoll, edge-triggered) and peeks at the queue then: how many bytes wait, and the
newest packet's stamp. The reader reads only as far as the watcher's first sight and takes its stamp, so each packet
keeps its own time however late the loop reads it, as long as the watcher gets the interpreter within the gap
between a stream's packets (it waits at most Python's switch interval, 5 ms, for a busy loop). The client arms a
socket from its request until the first answer token: that is where a late stamp costs the most, and the watcher's
work is a few peeks per request (more for a reasoning model, whose answer follows its reasoning).
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import struct
import sys

from gevent.monkey import get_original

log = logging.getLogger("slabench")

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


class Watched:
    """One socket the watcher may be told to watch: what it saw arrive that the reader has not read yet."""

    __slots__ = ("armed", "fd", "seen", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock  # the OS socket (not gevent's wrapper): the watcher's thread reads it outside the loop
        self.fd = sock.fileno()
        self.seen: list[tuple[int, int | None]] = []  # per sight: bytes waiting then, the newest packet's stamp
        self.armed = False


_PEEK_BYTES = 65536  # a response's bytes up to its first answer token are a few hundred
# Woken by a packet, the watcher waits LOOK_S and looks at every packet that came meanwhile, all streams': one turn
# (and one wait for the interpreter) for a batch's tokens, not one per packet. A packet keeps its own stamp when its
# stream's next packet comes more than LOOK_S later (else it takes that one's, at most LOOK_S later).
LOOK_S = 0.002
SWITCH_S = 0.0005  # the interpreter's switch interval while a watcher runs (see Watcher)


class Watcher:
    """The process's watcher thread (see the module doc); `watcher()` gives it."""

    def __init__(self) -> None:
        self._lock = get_original("_thread", "allocate_lock")()  # a native lock: the reader and the thread share it
        self._by_fd: dict[int, Watched] = {}
        self._peek = bytearray(_PEEK_BYTES)
        self.broken = False
        try:
            self._epoll = get_original("select", "epoll")()  # gevent's patching hides epoll: the OS's, for a thread
            get_original("_thread", "start_new_thread")(self._run, ())
        except (OSError, RuntimeError) as e:  # out of file descriptors or threads: every read as recv_stamped
            self._stop(e)
            return
        # Each of the watcher's system calls gives up the interpreter, and taking it back from a busy loop waits for
        # the switch interval (5 ms by default): a shorter one costs the loop nothing while the watcher is idle.
        sys.setswitchinterval(min(sys.getswitchinterval(), SWITCH_S))

    def arm(self, w: Watched) -> None:
        """Watch `w` from now on (what already waits is seen at once), forgetting what it saw before."""
        with self._lock:
            w.seen.clear()
            if w.armed or self.broken:
                return
            try:
                self._epoll.register(w.fd, select.EPOLLIN | select.EPOLLET)
            except FileExistsError:  # registered already (an earlier Watched of this socket)
                self._epoll.modify(w.fd, select.EPOLLIN | select.EPOLLET)
            except OSError:  # closed: its reads fall back to recv_stamped
                return
            self._by_fd[w.fd] = w
            w.armed = True

    def disarm(self, w: Watched) -> None:
        """Stop watching `w` (what it saw is kept for the reads that follow)."""
        if not w.armed:
            return
        with self._lock:
            w.armed = False
            if self._by_fd.get(w.fd) is w:
                del self._by_fd[w.fd]
                with contextlib.suppress(OSError):  # closed: the kernel has dropped it already
                    self._epoll.unregister(w.fd)

    def forget(self, w: Watched) -> None:
        """What the watcher saw of `w` so far no longer matches its queue: bytes were read past `read`."""
        with self._lock:
            w.seen.clear()

    def read(self, w: Watched, n: int) -> tuple[bytes, int | None]:
        """Up to `n` bytes of `w`, and when they arrived (the wall clock's nanoseconds; None: not known). Where the
        watcher saw bytes arrive, no further than its first sight, with that sight's stamp; else as `recv_stamped`."""
        with self._lock:
            if not w.seen:
                return recv_stamped(w.sock, n)
            waiting, seen_stamp = w.seen[0]
            data, stamp = recv_stamped(w.sock, min(n, waiting))
            k = len(data)
            w.seen = [(b - k, t) for b, t in w.seen if b > k]
        return data, seen_stamp if seen_stamp is not None else stamp

    def _run(self) -> None:
        try:
            self._watch()
        except Exception as e:  # a bug of ours: the stamps fall back to each read's, and the run goes on
            self._stop(e)

    def _stop(self, e: BaseException) -> None:
        self.broken = True
        log.warning("slabench: the arrival watcher stopped (%s: %s); stamps are each read's", type(e).__name__, e)

    def _watch(self) -> None:
        peek, flags = self._peek, socket.MSG_PEEK | socket.MSG_DONTWAIT
        sleep = get_original("time", "sleep")
        while True:
            came = self._epoll.poll()  # a packet on an armed socket (edge-triggered: each new one wakes it)
            sleep(LOOK_S)
            came += self._epoll.poll(0)
            with self._lock:
                for fd in {fd for fd, _ in came}:
                    w = self._by_fd.get(fd)
                    if w is None:
                        continue
                    try:
                        k, ancillary, _, _ = w.sock.recvmsg_into([peek], _ANCILLARY, flags)
                    except OSError:  # read meanwhile, or closed
                        continue
                    if k and (not w.seen or k > w.seen[-1][0]):
                        w.seen.append((k, _stamp(ancillary)))


_watcher: tuple[int, Watcher] | None = None


def watcher() -> Watcher:
    """This process's watcher, started on first use (a forked worker starts its own)."""
    global _watcher
    if _watcher is None or _watcher[0] != os.getpid():
        _watcher = (os.getpid(), Watcher())
    return _watcher[1]
