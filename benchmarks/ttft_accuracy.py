"""How close is the TTFT a Locust worker records to the truth, when many streams' events arrive at once?

A truth server (this script with `--serve`, its own process, asyncio) answers every chat request with a script of
known timing: a role-only delta at 100 ms (not a token: TTFT must not count it), the first content event at 150 ms
split across two writes (2 ms apart: the event is complete only with the second), then one token every `--itl`
with every other write carrying two events (coalesced), the usage chunk and `[DONE]`. It logs, per X-Request-Id, the
`perf_counter()` when the request arrived (the kernel's receive stamp of its last bytes: a busy server loop reads it
later, and that wait is the server's, part of the true TTFT) and right after the write that completed the first
content event — the same clock a worker stamps with (CLOCK_MONOTONIC, shared by every process on Linux).

Then the real `locust` command (one process: one worker, `locustfiles/chat_replay.py`) runs `--levels` users for
`--seconds`, all started at once and all requests alike, so the streams' first tokens arrive in the same
millisecond: the case where every microsecond a worker spends per event becomes TTFT error. Each level runs twice,
`--arrival-clock loop` (an event stamped when the worker's loop read it: before) then `kernel` (the kernel's receive
timestamp of its bytes: after). Per run it prints, over the answered requests after each stream's first (which also
connects, and the truth server cannot see the connect), the median and p99 of the TTFT error:
the record's TTFT − the server's (first content written − request read), the p99 of its two legs: the request's
(read by the server − the record's `sent`) and the response's (the record's first_token − first content written);
and the Locust process's CPU per request while requests were in flight. The same figures follow for a minimal
asyncio raw-socket client (no HTTP library, SSE parser, JSON or records) at the same streams, so what the machine
and the truth server add is seen beside it. It is not a strict floor: it sends all its streams' requests in the same
instant, and the truth server reads them one after another. Last, the most streams at which one worker process held
a p99 TTFT error ≤ 5 ms (of the levels tried; each stream asks for a token every `--itl`), and per Locust run what
held its event loop (`benchmarks/loop_probe.py`, loaded beside the locustfile): its garbage collections (how many,
how many full, the longest one's wall time and the most CPU time one held) and its stalls (the loop woke more than
5 ms late: how many, how many of them with more than 5 ms of CPU — the process's own work rather than the machine's
other load — the longest one, and the most CPU one stall held).

    python benchmarks/ttft_accuracy.py [--levels 8,64,256] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slabench.core import arrival  # noqa: E402
from slabench.core.record import Outcome  # noqa: E402
from slabench.core.sinks import read_records  # noqa: E402

ROLE_AT, TTFT, SPLIT_GAP = 0.100, 0.150, 0.002
CLOCKS = ("loop", "kernel")  # --arrival-clock: before, after
HELD_P99_MS = 5.0
STALL_S = 0.005  # the Locust process's loop this much late (or more) is a stall
Send = Callable[[bytes], Awaitable[None]]
PROMPT_WORDS = 64  # both clients send prompts of this size: the truth server's work per request is then alike


# -- the truth server ------------------------------------------------------------------------------------------
def _event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _delta(delta: dict, finish: str | None = None) -> dict:
    return {"id": "c", "object": "chat.completion.chunk", "model": "truth", "choices": [
        {"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip


async def _play(send: Send, t0: float, prompt_tokens: int, tokens: int, itl: float) -> float:
    loop = asyncio.get_running_loop()

    async def at(offset: float) -> None:
        await asyncio.sleep(max(0.0, t0 + offset - loop.time()))

    await send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
    await at(ROLE_AT)
    await send(_chunk(_event(_delta({"role": "assistant", "content": ""}))))
    first = _event(_delta({"content": "tok0"}))
    await at(TTFT - SPLIT_GAP)
    await send(_chunk(first[:10]))
    await at(TTFT)
    await send(_chunk(first[10:]))
    first_written = time.perf_counter()
    i = 1
    while i < tokens:
        await at(TTFT + i * itl)
        n = 2 if i % 2 == 0 and i + 1 < tokens else 1  # every other write: two events in one (coalesced)
        await send(_chunk(b"".join(_event(_delta({"content": f" tok{i + k}"})) for k in range(n))))
        i += n
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": tokens, "total_tokens": prompt_tokens + tokens}
    end = {**_delta({}, "length"), "usage": usage}
    await send(_chunk(_event(end) + b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return first_written


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


async def _recv(sock: socket.socket) -> tuple[bytes, float]:
    """Bytes from the socket and when they arrived: the kernel's receive stamp (else when they were read), on the
    `perf_counter()` clock. The truth is when the request reached the server, not when its busy loop read it."""
    loop = asyncio.get_running_loop()
    while True:
        try:
            data, stamp = arrival.recv_stamped(sock, 65536)
        except BlockingIOError:
            ready = loop.create_future()
            loop.add_reader(sock.fileno(), _wake, ready)
            try:
                await ready
            finally:
                loop.remove_reader(sock.fileno())
            continue
        return data, arrival.arrival(time.perf_counter(), time.time_ns(), stamp, -math.inf)


async def _handle(conn: socket.socket, log: Any, tokens: int, itl: float) -> None:
    loop = asyncio.get_running_loop()

    async def send(data: bytes) -> None:
        await loop.sock_sendall(conn, data)  # written at once while the socket has room

    buf = b""
    try:
        while True:
            while b"\r\n\r\n" not in buf:
                data, received = await _recv(conn)
                if not data:
                    return
                buf += data
            head, _, buf = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
            size = int(headers.get("content-length", 0))
            while len(buf) < size:
                data, received = await _recv(conn)
                if not data:
                    return
                buf += data
            body, buf = buf[:size], buf[size:]
            if not lines[0].startswith("POST") or "/chat/completions" not in lines[0]:
                await send(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                continue
            # A count that follows the prompt, as a real server's does (the client calibrates prompt sizes by it);
            # spaces, as the synthetic prompts are one-token words: a regex would hold up the other streams
            prompt_tokens = sum(m["content"].count(" ") + 1 for m in json.loads(body)["messages"])
            t0 = loop.time() - (time.perf_counter() - received)  # the script runs from the request's arrival
            first = await _play(send, t0, prompt_tokens, tokens, itl)
            log.write(json.dumps({"id": headers.get("x-request-id"), "received": received, "first": first}) + "\n")
    except ConnectionError:
        pass
    finally:
        conn.close()


async def _serve(log_path: str, tokens: int, itl: float) -> None:
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 - open for the server's life
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1024)
    listener.setblocking(False)
    print(listener.getsockname()[1], flush=True)
    tasks = set()
    while True:
        conn, _ = await loop.sock_accept(listener)
        conn.setblocking(False)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        arrival.enable(conn)
        task = loop.create_task(_handle(conn, log, tokens, itl))
        tasks.add(task)
        task.add_done_callback(tasks.discard)


# -- a minimal client, for comparison ------------------------------------------------------------------------------
async def _floor_client(port: int, users: int, seconds: float, out_path: str) -> None:
    """`users` raw-socket streams on asyncio, back to back: stamp, write the request, stamp the read that completes
    the first content event, read to the body's end. No HTTP library, no SSE parser, no JSON, no records: what is
    left of the TTFT error is the machine's (loopback, the scheduler, the truth server's own loop)."""
    content = " ".join(["hello"] * PROMPT_WORDS)
    body = json.dumps({"model": "truth", "messages": [{"role": "user", "content": content}]}).encode()
    deadline = time.perf_counter() + seconds
    rows: list[dict] = []

    async def stream(n: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        i = 0
        while time.perf_counter() < deadline:
            rid = f"floor-{n}-{i}"
            i += 1
            head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: {rid}\r\n"
            sent = time.perf_counter()
            writer.write(head.encode() + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            buf, first = b"", None
            while not buf.endswith(b"\r\n0\r\n\r\n"):
                if not (data := await reader.read(65536)):
                    return  # the server went away: what was measured stands
                buf += data
                if first is None and (at := buf.find(b'"tok0"')) >= 0 and buf.find(b"\n\n", at) >= 0:
                    first = time.perf_counter()
            rows.append({"id": rid, "sent": sent, "first": first})
        writer.close()

    await asyncio.gather(*(stream(n) for n in range(users)))
    Path(out_path).write_text("\n".join(json.dumps(r) for r in rows))


# -- the measurement -------------------------------------------------------------------------------------------
def run_level(url: str, users: int, seconds: int, out: Path, truth_log: Path, clock: str) -> dict:
    records_path = out / f"records-{users}-{clock}.jsonl"
    locustfiles = f"{ROOT / 'locustfiles' / 'chat_replay.py'},{ROOT / 'benchmarks' / 'loop_probe.py'}"
    argv = [sys.executable, "-m", "locust", "-f", locustfiles, "--headless"]
    argv += ["--only-summary", "--host", url, "--model", "truth", "-u", str(users), "-r", str(users)]
    argv += ["-t", f"{seconds}s", "--stop-timeout", "5", "--records", str(records_path)]
    argv += ["--prompt-tokens", str(PROMPT_WORDS), "--arrival-clock", clock]
    err_path = out / f"locust-{users}-{clock}.err"
    probe_path = out / f"loop-{users}-{clock}.json"
    env = {**os.environ, "LOOP_PROBE_OUT": str(probe_path)}
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env=env)
    ps = psutil.Process(proc.pid)
    cpu_at: list[tuple[float, float]] = []  # (perf_counter, the process's CPU seconds so far)
    while proc.poll() is None:
        try:
            t = ps.cpu_times()
            cpu_at.append((time.perf_counter(), t.user + t.system))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    if proc.returncode not in (0, 1, 4):  # 4: the run says its load generator was saturated: still measured
        raise RuntimeError(f"locust exited {proc.returncode}: {err_path.read_text()[-2000:]}")
    truth = _truth(truth_log)
    request_leg, response_leg = [], []
    records = [r for r in read_records(records_path) if r.outcome is Outcome.OK and r.request_id in truth]
    firsts = {}
    for r in sorted(records, key=lambda r: r.sent, reverse=True):
        firsts[r.user_id] = r.request_id
    # each stream's first request also connects (its `sent` counts the connect, which the truth server cannot see)
    records = [r for r in records if r.request_id not in firsts.values()]
    for r in records:
        t = truth[r.request_id]
        request_leg.append(t["received"] - r.sent)
        response_leg.append(r.first_token - t["first"])
    # CPU while requests were in flight only: the start (imports) and the end (summary, files) are not per request
    window = (min(r.sent for r in records), max(r.end for r in records)) if records else (0.0, 0.0)
    cpu = _cpu_at(cpu_at, window[1]) - _cpu_at(cpu_at, window[0])
    loop = json.loads(probe_path.read_text()) if probe_path.exists() else {"gc": [], "stalls": []}
    m = {"requests": len(records), "request_leg": request_leg, "response_leg": response_leg, "cpu_s": cpu}
    return {**m, "loop": loop}


def run_floor(url: str, users: int, seconds: int, out: Path, truth_log: Path) -> dict:
    rows_path = out / f"floor-{users}.jsonl"
    port = url.rsplit(":", 1)[1]
    argv = [sys.executable, __file__, "--floor-client", port, str(users), str(seconds), str(rows_path)]
    subprocess.run(argv, check=True, cwd=ROOT)
    truth = _truth(truth_log)
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    rows = [r for r in rows if r["id"] in truth and r["first"] is not None and not r["id"].endswith("-0")]
    return {
        "requests": len(rows),
        "request_leg": [truth[r["id"]]["received"] - r["sent"] for r in rows],
        "response_leg": [r["first"] - truth[r["id"]]["first"] for r in rows],
    }


def _truth(truth_log: Path) -> dict[str, dict]:
    return {row["id"]: row for row in map(json.loads, truth_log.read_text().splitlines())}


def _cpu_at(samples: list[tuple[float, float]], when: float) -> float:
    """The process's CPU seconds at `when`, interpolated between the samples around it."""
    for (t0, c0), (t1, c1) in itertools.pairwise(samples):
        if t0 <= when <= t1:
            return c0 + (c1 - c0) * (when - t0) / (t1 - t0)
    return samples[-1][1] if samples and when > samples[-1][0] else 0.0


def _ms(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] * 1000 if q < 100 else max(values) * 1e3


def print_loops(loops: list[tuple[int, str, dict]]) -> None:
    """What held the Locust process's loop while the load ran (benchmarks/loop_probe.py), per run."""
    ms = f"{STALL_S * 1000:g} ms"
    print("The Locust process's loop while the load ran: garbage collections (all, full),")
    print("the longest one's ms, the most CPU ms one held; stalls (the loop woke more than")
    print(f"{ms} late: all, and busy: those with more than {ms} of CPU), the longest's ms,")
    print("the most CPU ms one held (near its wall: the process's own work; far less: it")
    print("waited for a core the machine's other work held)")
    head = ("streams", "clock", "GC", "full", "GC max", "GC CPU", "stalls", "busy", "stall max", "stall CPU")
    print("{:>7} {:<6} {:>5} {:>4} {:>8} {:>7} {:>7} {:>6} {:>9} {:>9}".format(*head))
    for users, clock, loop in loops:
        gcs, stalls = loop["gc"], [(late, cpu) for _at, late, cpu in loop["stalls"] if late > STALL_S]
        print(
            f"{users:>7} {clock:<6} {len(gcs):>5} {sum(g[0] == 2 for g in gcs):>4} "
            f"{max((g[1] for g in gcs), default=0.0) * 1e3:>8.2f} {max((g[2] for g in gcs), default=0.0) * 1e3:>7.2f} "
            f"{len(stalls):>7} {sum(cpu > STALL_S for _, cpu in stalls):>6} "
            f"{max((late for late, _ in stalls), default=0.0) * 1e3:>9.1f} "
            f"{max((cpu for _, cpu in stalls), default=0.0) * 1e3:>9.1f}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--levels", default="8,64,256")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--itl", type=float, default=0.02)
    ap.add_argument("--serve", metavar="LOG", help=argparse.SUPPRESS)
    ap.add_argument("--floor-client", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.floor_client:
        port, users, seconds, out_path = args.floor_client
        asyncio.run(_floor_client(int(port), int(users), float(seconds), out_path))
        return
    if args.serve:
        asyncio.run(_serve(args.serve, args.tokens, args.itl))
        return
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "truth.jsonl"
        server_argv = [sys.executable, __file__, "--serve", str(log), "--tokens", str(args.tokens)]
        server = subprocess.Popen([*server_argv, "--itl", str(args.itl)], stdout=subprocess.PIPE, text=True)
        url = f"http://127.0.0.1:{server.stdout.readline().strip()}"
        print(
            f"truth server: TTFT {TTFT * 1000:.0f} ms (role-only delta first, split first event),\n{args.tokens} "
            f"tokens at ITL {args.itl * 1000:.0f} ms (coalesced pairs); load average {psutil.getloadavg()[0]:.2f}"
        )
        print("TTFT error (ms): the record's TTFT - the truth's; legs' p99: request, response")
        head = ("streams", "client", "req", "median", "p99", "req p99", "resp p99", "CPU µs/req")
        print("{:>7} {:<17} {:>6} {:>7} {:>7} {:>7} {:>8} {:>10}".format(*head))
        held: dict[str, int] = {}
        loops: list[tuple[int, str, dict]] = []
        try:
            for users in map(int, args.levels.split(",")):
                runs = [(f"slabench {c}", run_level(url, users, args.seconds, Path(tmp), log, c)) for c in CLOCKS]
                loops += [(users, c, m["loop"]) for c, (_, m) in zip(CLOCKS, runs, strict=True)]
                runs.append(("minimal asyncio", run_floor(url, users, args.seconds, Path(tmp), log)))
                for name, m in runs:
                    if not m["requests"]:
                        print(f"{users:>7} {name:<17} no answered request", flush=True)
                        continue
                    err = [a + b for a, b in zip(m["request_leg"], m["response_leg"], strict=True)]
                    cpu = f"{m['cpu_s'] / m['requests'] * 1e6:>10.0f}" if "cpu_s" in m else ""
                    print(
                        f"{users:>7} {name:<17} {m['requests']:>6} {_ms(err, 50):>+7.2f} {_ms(err, 99):>+7.2f} "
                        f"{_ms(m['request_leg'], 99):>+7.2f} {_ms(m['response_leg'], 99):>+8.2f} {cpu}",
                        flush=True,
                    )
                    if _ms(err, 99) <= HELD_P99_MS:
                        held[name] = max(held.get(name, 0), users)
        finally:
            server.terminate()
        for name in (*(f"slabench {c}" for c in CLOCKS), "minimal asyncio"):
            print(f"most streams with p99 error ≤ {HELD_P99_MS:g} ms, {name}: {held.get(name, 'none of those tried')}")
        print_loops(loops)


if __name__ == "__main__":
    main()
