"""Scrape the target's server metrics during every Locust run (master or local runner only; workers never do).

When the record hub has started a run (its `run_started`: the sink is open, no user has started) a poller process
(`python -m slabench.evidence.scrape`) takes the baseline scrape, then one a second; when the hub stops the run (its
`run_stopping`, before run_status.json is written) it takes the closing scrape and exits, leaving
`server_metrics.jsonl` beside the records.

Options: `--server-metrics URL|pods|pods:SELECTOR|off` (default: the --host's `/metrics`), `--server-metrics-interval
S` (default 1). `pods` scrapes every serving pod's own `/metrics` (found through the Kubernetes API by the label
selector in SLABENCH_SERVING_SELECTOR, or the one given) and sums them (`slabench.evidence.pod_scrape`): inside a
cluster with more than one replica, a Service would reach a random one per scrape.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import gevent
import gevent.lock
from gevent import subprocess
from locust import events
from locust.runners import WorkerRunner

from slabench.core.errors import UserError
from slabench.evidence.scrape import FILE_NAME, check_option, metrics_url, pods_selector
from slabench.locust.hooks import install_once
from slabench.locust.hub import find_hub, hub_of

log = logging.getLogger("slabench")
READY_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 20.0


def add_options(parser: Any) -> None:
    g = parser.add_argument_group("slabench server metrics")
    g.add_argument(
        "--server-metrics",
        default="",
        help="Prometheus URL to scrape during the run, 'pods' (every serving pod's, in a cluster) or 'off'; "
        "default: the target's /metrics",
    )
    g.add_argument("--server-metrics-interval", type=float, default=1.0, help="seconds between scrapes")


def _on_init(environment: Any, runner: Any = None, **_: Any) -> None:
    problem = check_option(getattr(environment.parsed_options, "server_metrics", "") or "")
    if problem:
        log.error("slabench: %s", problem)
        raise SystemExit(UserError.exit_code)
    if runner is not None and not isinstance(runner, WorkerRunner):  # workers never scrape
        hub = hub_of(environment)
        hub.run_started.append(lambda: _on_run_started(environment))
        hub.run_stopping.append(lambda: _stop(environment))  # the closing scrape, for the server's request count


def target_url(environment: Any) -> str | None:
    """The metrics URL to scrape, or None when scraping is off or there is no target."""
    choice = (getattr(environment.parsed_options, "server_metrics", "") or "").strip()
    if choice.lower() == "off":
        return None
    if choice:
        return choice
    host = environment.host or next((u.host for u in environment.user_classes if getattr(u, "host", None)), None)
    return metrics_url(host) if host else None


def poller_argv(url: str, out: Path, run_id: str, opts: Any, target_host: str | None) -> list[str]:
    """The poller's command line. The API key goes (by variable name, never on argv) only to the target's own
    host: a --server-metrics URL elsewhere must not receive it."""
    interval = ["--interval", str(getattr(opts, "server_metrics_interval", 1.0)), "--stdin-control"]
    selector = pods_selector(url)
    if selector:  # each pod's own /metrics, by IP: no API key (vLLM's key guards /v1 only)
        return [sys.executable, "-m", "slabench.evidence.pod_scrape", "--pods", selector, "--out", str(out),
                "--run-id", run_id, *interval]  # fmt: skip
    argv = [sys.executable, "-m", "slabench.evidence.scrape", "--url", url, "--out", str(out), "--run-id", run_id]
    argv += interval
    same_host = bool(target_host) and urlsplit(url).netloc == urlsplit(target_host).netloc
    key_env = getattr(opts, "api_key_env", "")
    if same_host and key_env:
        argv += ["--api-key-env", key_env]
    if getattr(opts, "insecure", False):
        argv.append("--insecure")
    return argv


class ScrapeProcess:
    """One poller process for one run."""

    def __init__(self, url: str, out: Path, run_id: str, opts: Any, target_host: str | None) -> None:
        self.url, self.out = url, out
        argv = poller_argv(url, out, run_id, opts, target_host)
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.summary = ""
        # One reader of its stdout at a time: a run stopped while the start still waits for "ready" (a short run on
        # a busy machine) read it from two greenlets, and the file raised "reentrant call" out of Locust's test_stop.
        self._reading = gevent.lock.Semaphore()

    def wait_ready(self) -> bool:
        """Block (cooperatively) until the baseline scrape was attempted."""
        with gevent.Timeout(READY_TIMEOUT_S, False), self._reading:
            line = self.proc.stdout.readline()
            if line.startswith("slabench-scrape ready"):
                return True
            # It exited before its first scrape (its own error is already on stderr).
            log.warning("slabench: the server-metrics poller did not start; the run goes on without server metrics")
            return False
        log.warning("slabench: the server-metrics poller did not report ready in %.0f s", READY_TIMEOUT_S)
        return False

    def stop(self) -> str:
        """Ask for the closing scrape and wait for the poller to exit; returns its summary line."""
        try:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it already exited (no metrics at the URL)
        with gevent.Timeout(STOP_TIMEOUT_S, False), self._reading:
            for line in self.proc.stdout:
                if line.startswith("slabench-scrape done"):
                    self.summary = line.removeprefix("slabench-scrape done").strip()
            self.proc.wait()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        return self.summary


def _on_run_started(environment: Any) -> None:
    """The hub's run_started (master or local runner): its sink is open, no user has started yet."""
    hub = hub_of(environment)
    _stop(environment)  # a previous run's poller that never saw its test_stop
    url = target_url(environment)
    if url is None:
        return
    assert hub.store.sink is not None  # run_started comes after the sink is opened
    proc = ScrapeProcess(
        url, hub.store.sink.path.parent / FILE_NAME, hub.run.run_id, environment.parsed_options, environment.host
    )
    hub.parts.put(proc)
    proc.wait_ready()


def _stop(environment: Any) -> None:
    hub = find_hub(environment)
    proc = hub.parts.pop(ScrapeProcess) if hub is not None else None
    if proc is None:
        return
    summary = proc.stop()
    if summary:
        log.info("slabench: server metrics: %s", summary)


def install(hooks: Any = events) -> None:
    """Register on Locust's hooks once (idempotent), from `slabench.locust.plugin.install` (the hub exists at init)."""
    if install_once(hooks, "scrape", add_options, _on_init):
        # the hub's stop takes the closing scrape
        hooks.quitting.add_listener(lambda environment, **_: _stop(environment))
