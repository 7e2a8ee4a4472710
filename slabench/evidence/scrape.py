"""Server-side metrics during a run: poll the target's Prometheus `/metrics`, keep what the report needs.

Every scrape becomes one JSON line in `server_metrics.jsonl` beside the records::

    {"schema_version": 1, "run_id": "...", "t": <wall s, request sent>, "t_recv": <wall s, body read>,
     "gauges": {"num_requests_running": 3.0, "num_requests_waiting": 0.0, "kv_cache_usage_perc": 0.02},
     "counters": {"prompt_tokens_total": 1234.0, ...},                           # cumulative, as the server says
     "histograms": {"time_to_first_token_seconds": {"count": 9.0, "sum": 0.8, "buckets": {"0.001": 0.0, ...,
                    "+Inf": 9.0}}, ...},                                        # cumulative
     "deltas": {"prompt_tokens_total": 12.0, "time_to_first_token_seconds": {"count": 1.0, "sum": 0.1}, ...}}

Deltas are against the previous successful scrape (a counter that went down means the server restarted: the delta is
then the new value). Values are summed over label sets (engines, models); `kv_cache_usage_perc` is averaged.
Metric names are vLLM V1's (`vllm:` prefix); the embedded simulator serves the same names.

The poller runs as its own process (`python -m slabench.evidence.scrape`), started and stopped by
`slabench.locust.scrape`: parsing vLLM's ~56 KB exposition takes ~8–15 ms of CPU, which inside Locust's event loop would
delay the timestamps of stream chunks arriving meanwhile. Protocol with the parent (`--stdin-control`): one line on
stdout once the first scrape was attempted (so the baseline is taken before any request goes out), then a line `stop` or
EOF on stdin (or SIGTERM) makes it take a closing scrape, print a summary line and exit. By hand (`slabench scrape`),
Ctrl-C stops it. A missing `/metrics` (404, or not Prometheus text) is one warning line on stderr, and no file: the run
goes on without server metrics.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import gevent
from prometheus_client.parser import text_string_to_metric_families

from slabench.core.errors import UserError
from slabench.core.jsonl import read_json_lines
from slabench.evidence.provenance import SELECTOR_ENV

SCHEMA_VERSION = 1
FIRST_SCRAPE_TIMEOUT_S = 2.0  # the baseline scrape, taken before any user starts
PREFIX = "vllm:"
FILE_NAME = "server_metrics.jsonl"
GAUGES = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")
AVERAGED = frozenset({"kv_cache_usage_perc"})  # a share per engine: summing engines would exceed 1
COUNTERS = (
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_success_total",
    "num_preemptions_total",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
)
HISTOGRAMS = (
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "request_time_per_output_token_seconds",
)
# The embedded simulator's own counters (not vLLM's): engine steps and those that ran late (a starved CPU).
SIM_COUNTERS = (
    "slabench_sim_engine_steps_total",
    "slabench_sim_engine_late_steps_total",
    "slabench_sim_engine_late_seconds_total",
    "slabench_sim_idle_late_seconds_total",
)
# Requests the server received, from whichever counter it has, summed into counters["requests_received_total"]:
# the simulator's own, or vLLM's HTTP instrumentator count of completion calls (counted as each response ends). The
# run's records are reconciled against it (`slabench.evidence.accounting`). family → (label, values it must have) or
# None.
RECEIVED = "requests_received_total"
_RECEIVED_FAMILIES: dict[str, tuple[str, frozenset[str]] | None] = {
    "slabench_sim_requests_received": None,
    "http_requests": ("handler", frozenset({"/v1/chat/completions", "/v1/completions"})),
}
_WANTED = (
    frozenset(PREFIX + n for n in (*GAUGES, *(c.removesuffix("_total") for c in COUNTERS), *HISTOGRAMS))
    | {c.removesuffix("_total") for c in SIM_COUNTERS}
    | set(_RECEIVED_FAMILIES)
)


class NotPrometheus(ValueError):
    """The body is not Prometheus text exposition."""


# -- pure parts -----------------------------------------------------------------------------------------------------
def _family_of(line: str) -> str:
    """Tracked family a text-format line belongs to (sample or # HELP/# TYPE line), or ""."""
    if line.startswith("#"):
        parts = line.split(None, 3)
        name = parts[2] if len(parts) > 2 else ""
    else:
        name = line.split("{", 1)[0].split(" ", 1)[0]
    if name in _WANTED:
        return name
    for suffix in ("_bucket", "_count", "_sum", "_total"):  # not `_created`: timestamps, not values
        if name.endswith(suffix) and name[: -len(suffix)] in _WANTED:
            return name[: -len(suffix)]
    return ""


def parse(text: str) -> dict[str, Any]:
    """Prometheus text → {"gauges", "counters", "histograms"} with the tracked vLLM metrics that are present.

    Only the tracked families' lines are handed to the parser (vLLM serves ~90 families; parsing them all costs
    ~15 ms). Raises NotPrometheus when there is no tracked metric: not Prometheus text (an HTML error page, say),
    or Prometheus text from a server that is not vLLM-like."""
    kept = "\n".join(line for line in text.splitlines() if _family_of(line) in _WANTED)
    gauges: dict[str, list[float]] = {}
    counters: dict[str, float] = {}
    hists: dict[str, dict[str, Any]] = {}
    try:
        for fam in text_string_to_metric_families(kept + "\n"):
            if fam.name in _RECEIVED_FAMILIES:
                _add_received(fam, _RECEIVED_FAMILIES[fam.name], counters)
                continue
            short = fam.name.removeprefix(PREFIX)
            # A declared family without samples (labelled, no child yet: the simulator before its first request)
            # is zero, not unknown: the baseline of a fresh server must still count.
            if short + "_total" in COUNTERS or short + "_total" in SIM_COUNTERS:
                counters.setdefault(short + "_total", 0.0)
            elif short in HISTOGRAMS:
                hists.setdefault(short, {"count": 0.0, "sum": 0.0, "buckets": {}})
            for s in fam.samples:
                name = s.name.removeprefix(PREFIX)
                if short in GAUGES:
                    gauges.setdefault(short, []).append(s.value)
                elif name in COUNTERS or name in SIM_COUNTERS:
                    counters[name] = counters.get(name, 0.0) + s.value
                elif short in HISTOGRAMS:
                    h = hists.setdefault(short, {"count": 0.0, "sum": 0.0, "buckets": {}})
                    if name.endswith("_count"):
                        h["count"] += s.value
                    elif name.endswith("_sum"):
                        h["sum"] += s.value
                    elif name.endswith("_bucket"):
                        le = s.labels["le"]
                        h["buckets"][le] = h["buckets"].get(le, 0.0) + s.value
    except ValueError as e:
        raise NotPrometheus(str(e)) from None
    if not (gauges or hists or set(counters) - {RECEIVED}):
        raise NotPrometheus(f"no {PREFIX}* metrics" if _looks_like_prometheus(text) else "not Prometheus text")
    return {
        "gauges": {k: (sum(v) / len(v) if k in AVERAGED else sum(v)) for k, v in gauges.items()},
        "counters": counters,
        "histograms": {k: {**h, "buckets": _sorted_buckets(h["buckets"])} for k, h in hists.items()},
    }


def _add_received(fam: Any, match: tuple[str, frozenset[str]] | None, counters: dict[str, float]) -> None:
    counters.setdefault(RECEIVED, 0.0)
    for s in fam.samples:
        if s.name.endswith("_total") and (match is None or s.labels.get(match[0]) in match[1]):
            counters[RECEIVED] += s.value


def _looks_like_prometheus(text: str) -> bool:
    try:
        return any(True for _ in text_string_to_metric_families(text))
    except ValueError:
        return False


def _le(key: str) -> float:
    return math.inf if key == "+Inf" else float(key)


def _sorted_buckets(b: dict[str, float]) -> dict[str, float]:
    return {k: b[k] for k in sorted(b, key=_le)}


def _counter_delta(prev: float | None, cur: float) -> float:
    """A counter that went down was reset (server restart): everything since counts."""
    if prev is None:
        return 0.0
    return cur - prev if cur >= prev else cur


def deltas(prev: dict[str, Any] | None, cur: dict[str, Any]) -> dict[str, Any]:
    """Counter and histogram count/sum increments from `prev` to `cur` (zeros for the first scrape)."""
    out: dict[str, Any] = {}
    pc = (prev or {}).get("counters", {})
    for k, v in cur.get("counters", {}).items():
        out[k] = _counter_delta(pc.get(k) if prev else None, v)
    ph = (prev or {}).get("histograms", {})
    for k, h in cur.get("histograms", {}).items():
        p = ph.get(k) if prev else None
        reset = p is not None and h["count"] < p["count"]
        base = None if p is None else ({"count": 0.0, "sum": 0.0} if reset else p)
        out[k] = {
            "count": 0.0 if base is None else h["count"] - base["count"],
            "sum": 0.0 if base is None else h["sum"] - base["sum"],
        }
    return out


def read_scrapes(path: str | Path, run_id: str | None = None) -> list[dict[str, Any]]:
    """The scrapes in a `server_metrics.jsonl` (optionally one run's), oldest first; [] when there is no file."""
    p = Path(path)
    if p.is_dir():
        p = p / FILE_NAME
    if not p.exists():
        return []
    lines = read_json_lines(p, _checked_scrape, "not a server-metrics scrape", "was the file edited?")
    rows = [row for _, row in lines]
    if run_id is not None:
        rows = [r for r in rows if r.get("run_id") == run_id]
    return sorted(rows, key=lambda r: r["t"])


def _checked_scrape(row: Any) -> dict[str, Any]:
    """`row`, checked as a scrape as `Scraper.scrape_once` writes it: a finite wall time `t`, and its metric
    sections (gauges, counters, histograms, deltas) maps whose every value is a finite number or such a map; only a
    histogram's `sum` may be negative (a server may observe negative values, and then the sum falls), every other
    value is a count."""
    if not isinstance(row, dict):
        raise ValueError("not a JSON object")
    t = row.get("t")
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        raise ValueError(f"t is {t!r}; a scrape's wall time is a number")
    if not isinstance(row.get("run_id", ""), str):
        raise ValueError(f"run_id is {row['run_id']!r}; it is text")
    for section in ("gauges", "counters", "histograms", "deltas"):
        if section in row:
            if not isinstance(row[section], dict):
                raise ValueError(f"{section} is {row[section]!r}; it is a map of metrics")
            _check_values(row[section], section)
    return row


def _check_values(value: Any, where: str) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _check_values(v, f"{where}.{k}")
    elif not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{where} is {value!r}; a metric is a finite number")
    elif value < 0 and not where.endswith(".sum"):
        raise ValueError(f"{where} is {value!r}; a count is never negative")


def series(scrapes: Iterable[dict[str, Any]]) -> dict[str, list[float | None]]:
    """Columns for plotting: wall time `t`, the gauges, and per-interval rates (tokens/s) from the deltas.
    A gauge a scrape lacks is None (no data), never 0."""
    rows = list(scrapes)
    out: dict[str, list[float | None]] = {"t": [r["t"] for r in rows]}
    for g in GAUGES:
        out[g] = [r.get("gauges", {}).get(g) for r in rows]
    for c in ("prompt_tokens_total", "generation_tokens_total"):
        rates: list[float | None] = [None]
        for a, b in itertools.pairwise(rows):
            d = b.get("deltas", {}).get(c)
            dt = b["t"] - a["t"]
            rates.append(d / dt if d is not None and dt > 0 else None)
        out[c.removesuffix("_total") + "_per_s"] = rates[: len(rows)]
    return out


def summarize(scrapes: Iterable[dict[str, Any]], window: tuple[float, float] | None = None) -> dict[str, Any]:
    """One run's (or window's) server side in a few numbers, for a per-level report next to the client's figures:
    mean and max of each gauge over the scrapes taken inside the window, and counter rises across it (preemptions,
    prefix-cache hit rate). None for what no scrape had."""
    rows = [r for r in scrapes if window is None or window[0] <= r["t"] <= window[1]]
    out: dict[str, Any] = {"scrapes": len(rows)}
    for g in GAUGES:
        vals = [r["gauges"][g] for r in rows if g in r.get("gauges", {})]
        out[f"{g}_mean"] = sum(vals) / len(vals) if vals else None
        out[f"{g}_max"] = max(vals) if vals else None

    def rise(name: str) -> float | None:
        vals = [r["deltas"][name] for r in rows[1:] if name in r.get("deltas", {})]
        return sum(vals) if vals else None

    out["preemptions"] = rise("num_preemptions_total")
    queries, hits = rise("prefix_cache_queries_total"), rise("prefix_cache_hits_total")
    out["prefix_cache_hit_rate"] = hits / queries if queries and hits is not None else None
    return out


def metrics_url(base_url: str) -> str:
    """`<server root>/metrics` for a target given like --host (`http://h:8000` or `https://h/v1`)."""
    from slabench.core.client import parse_base_url

    scheme, host, port, prefix = parse_base_url(base_url)
    default = 443 if scheme == "https" else 80
    netloc = host if port == default else f"{host}:{port}"
    if ":" in host:  # IPv6 literal
        netloc = f"[{host}]" if port == default else f"[{host}]:{port}"
    return f"{scheme}://{netloc}{prefix}/metrics"


def pods_selector(value: str) -> str | None:
    """The serving pods' label selector of a `pods` / `pods:SELECTOR` value ("" when none is known); None: not one."""
    v = value.strip()
    if v == "pods":
        return os.environ.get(SELECTOR_ENV, "").strip()
    return v.removeprefix("pods:").strip() if v.startswith("pods:") else None


def check_option(value: str) -> str | None:
    """What is wrong with a --server-metrics value, or None."""
    v = value.strip()
    if not v or v.lower() == "off":
        return None
    selector = pods_selector(v)
    if selector is not None:
        if not selector:
            return (
                f"--server-metrics {v!r}: no serving pods' label selector — set {SELECTOR_ENV} (the Locust chart "
                "does for slabench deploy) or give pods:SELECTOR, e.g. pods:app.kubernetes.io/instance=vllm-serving"
            )
        return None
    parts = urlsplit(v)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"--server-metrics {v!r}: expected 'off', 'pods' or a URL like http://10.0.0.5:8000/metrics"
    return None


# -- the poller -----------------------------------------------------------------------------------------------------
class FetchError(Exception):
    def __init__(self, message: str, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent  # the server answered, and it has no metrics: asking again will not help


class Scraper:
    """Polls one `/metrics` URL and appends a JSON line per successful scrape. Not thread-safe; one per run."""

    def __init__(
        self,
        url: str,
        out: str | Path,
        run_id: str = "",
        api_key: str | None = None,
        verify_tls: bool = True,
        timeout: float = 5.0,
        first_timeout: float = FIRST_SCRAPE_TIMEOUT_S,
    ) -> None:
        from geventhttpclient import HTTPClient

        parts = urlsplit(url)
        example = "expected an http:// or https:// URL like http://127.0.0.1:8000/metrics"
        try:
            port = parts.port
        except ValueError as e:
            raise UserError(f"--url {url!r}: {e}; {example}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UserError(f"--url {url!r}: {example}")
        self.url, self.out, self.run_id = url, Path(out), run_id
        self.timeout, self.first_timeout = timeout, first_timeout
        self.path = (parts.path or "/metrics") + (f"?{parts.query}" if parts.query else "")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = HTTPClient(
            parts.hostname,
            port or (443 if parts.scheme == "https" else 80),
            ssl=parts.scheme == "https",
            insecure=not verify_tls,
            connection_timeout=timeout,
            network_timeout=timeout,
        )
        self._file: Any = None
        self.prev: dict[str, Any] | None = None
        self.scrapes = 0
        self.failures = 0
        self.warned: set[str] = set()

    def fetch(self) -> str:
        # The whole exchange is bounded, not only each read: the baseline scrape holds up the run's start, and a
        # server that accepts and never answers (or trickles) must not hold it for long.
        limit = self.timeout if self.scrapes or self.failures else self.first_timeout
        try:
            with gevent.Timeout(limit, TimeoutError(f"no answer within {limit:g} s")):
                resp = self._client.get(self.path, headers=self._headers)
                body = resp.read()
        except Exception as e:  # any transport failure: counted, warned once, retried next tick
            raise FetchError(f"{type(e).__name__}: {e}".rstrip(": "), permanent=False) from None
        if resp.status_code != 200:
            raise FetchError(f"HTTP {resp.status_code}", permanent=resp.status_code in (404, 405, 410, 501))
        return body.decode("utf-8", "replace")

    def scrape_once(self) -> dict[str, Any]:
        """One scrape, written to the file; raises FetchError (or NotPrometheus, also permanent)."""
        t = time.time()
        text = self.fetch()
        t_recv = time.time()
        snap = parse(text)
        row = {"schema_version": SCHEMA_VERSION, "run_id": self.run_id, "t": t, "t_recv": t_recv, **snap}
        row["deltas"] = deltas(self.prev, snap)
        self._write(row)
        self.prev = snap
        self.scrapes += 1
        return row

    def _write(self, row: dict[str, Any]) -> None:
        if self._file is None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.out.open("a", encoding="utf-8")
        self._file.write(json.dumps(row, separators=(",", ":")) + "\n")
        self._file.flush()

    def try_scrape(self) -> bool | None:
        """True: scraped; False: failed, try again; None: this server has no metrics, stop asking."""
        try:
            self.scrape_once()
            return True
        except (FetchError, NotPrometheus) as e:
            self.failures += 1
            permanent = isinstance(e, NotPrometheus) or e.permanent
            kind = "permanent" if permanent else "transient"
            if kind not in self.warned:  # one line per kind of trouble, not one per second
                self.warned.add(kind)
                what = str(e)
                tail = (
                    "the run goes on without server metrics"
                    if permanent
                    else "retrying every interval; gaps show as missing scrapes"
                )
                print(f"slabench: no server metrics from {self.url} ({what}); {tail}", file=sys.stderr, flush=True)
            return None if permanent and self.scrapes == 0 else False

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self._client.close()


def run(scraper: Scraper, interval: float, stdin: Any = None) -> int:
    """The poller's loop: a scrape at once, then every `interval` seconds on a fixed grid (a slow scrape skips
    ticks instead of drifting), until SIGTERM/SIGINT, or `stop`/EOF on `stdin` when one is given; then a closing
    scrape. Signal handlers are restored on return."""
    stopping = False

    def on_signal(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    # SIGINT too: Ctrl-C in a terminal reaches the whole process group; the poller still closes its window.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        state = scraper.try_scrape()
        print(f"slabench-scrape ready {scraper.url}", flush=True)
        start = time.monotonic()
        tick = 1
        while state is not None and not stopping:
            wait = max(0.0, start + tick * interval - time.monotonic())
            if _wait_for_stop(stdin, min(wait, STOP_POLL_S)):
                break
            if time.monotonic() < start + tick * interval:
                continue  # woke early to look at the stop flag
            tick = math.floor((time.monotonic() - start) / interval) + 1
            state = scraper.try_scrape()
        if state is not None:
            scraper.try_scrape()  # the window's closing value
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        scraper.close()
    out = scraper.out if scraper.scrapes else "no file"
    print(f"slabench-scrape done {scraper.scrapes} scrapes, {scraper.failures} failed → {out}", flush=True)
    return 0


STOP_POLL_S = 0.1  # how quickly a signal is noticed between scrapes


def _wait_for_stop(stdin: Any, seconds: float) -> bool:
    """Sleep up to `seconds`; True when `stdin` (if any) says stop or ended."""
    if stdin is None:
        time.sleep(seconds)
        return False
    readable, _, _ = select.select([stdin], [], [], seconds)
    if not readable:
        return False
    line = stdin.readline()
    return not line or line.strip() == "stop"


def add_poll_options(p: argparse.ArgumentParser) -> None:
    """What every poller's command line takes (this one's, and the serving pods' in `pod_scrape`): where its scrapes
    go, how often, the run id on them, and whether stdin stops it; `poll` runs it so."""
    p.add_argument("--out", required=True, help=f"JSON Lines file to append to (usually runs/<id>/{FILE_NAME})")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between scrapes")
    p.add_argument("--run-id", default="", help="stamped on every line")
    p.add_argument(
        "--stdin-control",
        action="store_true",
        help="also stop on a `stop` line or end of input on stdin (how Locust runs it: a dead parent ends it too)",
    )


def poll(a: argparse.Namespace, make_scraper: Callable[[], Scraper]) -> int:
    """Run the scraper `make_scraper` builds as the poll options in `a` say, once its --interval is checked."""
    if a.interval <= 0:
        raise UserError(f"--interval {a.interval}: must be > 0 seconds, e.g. --interval 1")
    return run(make_scraper(), a.interval, stdin=sys.stdin if a.stdin_control else None)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", required=True, help="the /metrics URL, e.g. http://127.0.0.1:8000/metrics")
    add_poll_options(p)
    p.add_argument("--api-key-env", default="", help="environment variable holding a bearer token, if needed")
    p.add_argument("--insecure", action="store_true", help="skip TLS certificate verification")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`slabench scrape`: the same poller by hand (stops on Ctrl-C, `stop` or end of input)."""
    p = sub.add_parser("scrape", help="poll a server's Prometheus /metrics into server_metrics.jsonl until stopped")
    _add_arguments(p)
    p.set_defaults(func=_run_args)


def _run_args(a: argparse.Namespace) -> int:
    from slabench.core.api_key import api_key_from_env

    def scraper() -> Scraper:
        key = api_key_from_env(a.api_key_env) if a.api_key_env else None
        return Scraper(a.url, a.out, run_id=a.run_id, api_key=key, verify_tls=not a.insecure)

    return poll(a, scraper)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m slabench.evidence.scrape", description=__doc__.split("\n\n")[0])
    _add_arguments(p)
    try:
        return _run_args(p.parse_args(argv))
    except UserError as e:
        print(f"slabench: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
