"""A scripted HTTP server for exact-timing tests of the streaming client (a real server in its own process).

Scripts (a JSON file) map a name to a list of steps; a request to ``/<name>/v1/...`` plays that script:
  {"status": 200, "headers": {...}}        response head (first step; default 200 text/event-stream, chunked)
  {"at": 0.25, "send": "data: {...}\\n\\n"}  send these bytes as one HTTP chunk, 0.25 s after the request arrived
  {"at": 0.5, "body": "..."}               a whole non-chunked body (with Content-Length) then stop
  {"at": 0.3, "cut": true}                 close the connection abruptly (no terminating chunk)
  {"at": 0.3, "end": true}                 terminating chunk (end of a well-formed response)
  {"at": 0.05, "raw": "HTTP/1.1 200 OK..."}  these bytes as they are (a script with raw steps writes its own head)
Each request's actual send times (perf_counter, comparable across processes on Linux) are appended to the log
file as JSON lines, so tests compare client-measured times with when bytes really left the server.

    python tests/servers/scripted_sse_server.py SCRIPTS.json LOG.jsonl   # prints the port, then serves
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time


def precise_sleep_until(t: float) -> None:
    while True:
        left = t - time.perf_counter()
        if left <= 0:
            return
        time.sleep(left - 0.001 if left > 0.002 else 0)  # sleep most of it, spin the last millisecond


def read_request(conn: socket.socket) -> str | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    while len(body) < length:
        body += conn.recv(65536)
    return head.split(b" ")[1].decode()


def play(conn: socket.socket, steps: list[dict], log: list, t0: float) -> bool:
    """Returns whether the connection may be kept alive."""
    if "status" not in steps[0]:  # a 200 head, unless raw steps write their own
        steps = [{"status": None if any("raw" in s for s in steps) else 200}, *steps]
    head = steps[0]
    headers = {"Content-Type": "text/event-stream", "Transfer-Encoding": "chunked", **head.get("headers", {})}
    has_body = any("body" in s for s in steps)
    if has_body:
        headers.pop("Transfer-Encoding")
    for s in steps:
        if "at" in s:
            precise_sleep_until(t0 + s["at"])
        if "raw" in s:
            log.append(time.perf_counter())
            conn.sendall(s["raw"].encode())
        if s.get("status") is not None:
            lines = [f"HTTP/1.1 {s['status']} X"] + [f"{k}: {v}" for k, v in headers.items() if not has_body]
            if not has_body:
                conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        if "body" in s:
            body = s["body"].encode()
            lines = [f"HTTP/1.1 {head['status']} X"] + [f"{k}: {v}" for k, v in headers.items()]
            lines.append(f"Content-Length: {len(body)}")
            log.append(time.perf_counter())
            conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
            return True
        if "send" in s:
            data = s["send"].encode()
            log.append(time.perf_counter())  # before the write: the earliest its bytes can arrive (a busy machine
            conn.sendall(b"%x\r\n%s\r\n" % (len(data), data))  # may run the client before this thread again)
        if s.get("cut"):
            conn.shutdown(socket.SHUT_RDWR)
            return False
        if s.get("end"):
            conn.sendall(b"0\r\n\r\n")
            return True
    return True


def main() -> None:
    with open(sys.argv[1]) as f:
        scripts = json.load(f)
    log_path = sys.argv[2]
    srv = socket.create_server(("127.0.0.1", 0))
    print(srv.getsockname()[1], flush=True)
    lock = threading.Lock()

    def handle(conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with conn:
            while True:
                path = read_request(conn)
                if path is None:
                    return
                t0 = time.perf_counter()
                name = path.strip("/").split("/")[0]
                sent: list[float] = []
                keep = play(conn, scripts[name], sent, t0)
                with lock, open(log_path, "a") as f:
                    f.write(json.dumps({"script": name, "received": t0, "sent": sent}) + "\n")
                if not keep:
                    return

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
