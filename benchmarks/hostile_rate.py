"""Requests per second per closed-loop user against a server that fails every request, before and after backoff.

Starts `tests/servers/hostile_server.py` (its own process) and, for each failing behaviour, runs `--users` closed-loop
users (greenlets in this process, each with its own `StreamingClient`, sending back to back as `LLMUser.request` does)
for `--seconds`, twice: with the wait rule of the parent commit ("before": only 429/503 waited, for their Retry-After
as given — 0 or a past date meant no wait — or 0.5·2^(n-1) s without one; 1 s after a connect or closed error; every
other failure, none) and with `slabench.locust.backoff.Backoff` ("after": every failure class, bounded exponential
backoff with jitter, Retry-After as a floor). It prints the POSTs per second per user the server received (a
redirect's hops included) and the bound the backoff guarantees over the same time.

    python benchmarks/hostile_rate.py [--seconds 4] [--users 2] [--modes http_500,retry_after_zero,...]
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import random  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from slabench.core.client import StreamingClient, Target, chat_body  # noqa: E402
from slabench.core.record import ErrorCategory, Outcome, RecordMeta, RequestRecord  # noqa: E402
from slabench.locust.backoff import FIRST_S, MAX_S, Backoff  # noqa: E402

MODES = [
    *("retry_after_zero", "retry_after_past_date", "rate_limited_429", "http_500", "html_502", "html_200"),
    *("reset_after_head", "cut_mid_stream", "bad_json", "revoked_key_401", "redirect_loop_308"),
]
Rule = Callable[[RequestRecord], float | None]


def before_rule() -> Rule:
    """The parent commit's `LLMUser.backoff_after` and its sleep after connect/closed errors."""
    rejections = 0

    def wait(r: RequestRecord) -> float | None:
        nonlocal rejections
        if r.http_status not in (429, 503) or r.outcome is not Outcome.ERROR:
            rejections = 0
            return 1.0 if r.error_category in (ErrorCategory.CONNECT, ErrorCategory.CLOSED) else None
        rejections += 1
        w = r.retry_after if r.retry_after is not None else FIRST_S * 2 ** min(rejections - 1, 16)
        return min(w, MAX_S)

    return wait


def after_rule(seed: int) -> Rule:
    return Backoff(random.Random(seed)).after


def bound(seconds: float) -> int:
    """The most failed requests a user can make in `seconds`: the n-th failure in a row waits at least d/2."""
    n, t = 1, 0.0
    while (t := t + min(FIRST_S * 2 ** (n - 1), MAX_S) / 2) <= seconds:
        n += 1
    return n


def user(url: str, mode: str, seconds: float, rule: Rule) -> int:
    """One closed-loop user for `seconds`; returns the POSTs the server received from it."""
    client = StreamingClient(Target(f"{url}/{mode}", stall_timeout=5.0, request_timeout=10.0))
    body = chat_body("m", [{"role": "user", "content": "hi"}], 8)
    end = time.monotonic() + seconds
    posts = 0
    try:
        while time.monotonic() < end:
            r = client.send("chat", body, RecordMeta(run_id="hostile-rate")).record
            posts += 1 + (r.redirects or 0)
            wait = rule(r)
            if wait:
                gevent.sleep(min(wait, max(0.0, end - time.monotonic())))
    finally:
        client.close()
    return posts


def rate(url: str, mode: str, users: int, seconds: float, rules: list[Rule]) -> float:
    """POSTs per second per user."""
    jobs = [gevent.spawn(user, url, mode, seconds, rules[i]) for i in range(users)]
    gevent.joinall(jobs, raise_error=True)
    return sum(j.value for j in jobs) / users / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=4.0, help="per behaviour and rule")
    ap.add_argument("--users", type=int, default=2)
    ap.add_argument("--modes", default=",".join(MODES), help="hostile behaviours, comma-separated")
    a = ap.parse_args()
    log = Path(tempfile.mkdtemp(prefix="hostile-rate-")) / "server.jsonl"
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "servers" / "hostile_server.py"), str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{int(server.stdout.readline())}"
        print(f"{a.users} closed-loop users, {a.seconds:g} s per behaviour and rule; POSTs/s per user")
        print(f"{'behaviour':<24}{'before':>14}{'after':>14}")
        for mode in a.modes.split(","):
            before = rate(url, mode, a.users, a.seconds, [before_rule() for _ in range(a.users)])
            after = rate(url, mode, a.users, a.seconds, [after_rule(i) for i in range(a.users)])
            print(f"{mode:<24}{before:>14,.1f}{after:>14,.2f}", flush=True)
        n = bound(a.seconds)
        print(f"bound after: at most {n} failed requests per user in {a.seconds:g} s ({n / a.seconds:.2f}/s),")
        print(f"then one per {MAX_S / 2:g} s at most once capped (a redirect loop: 6 POSTs each)")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
