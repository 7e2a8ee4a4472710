"""Server metrics from every serving pod: each replica's own `/metrics`, summed into one fleet row per scrape.

Through a Service (or the ALB, which routes only `/v1`) a scrape reaches one replica at random, so its counters jump
between replicas and a delta means nothing. Inside a cluster the poller instead lists the serving pods through the
Kubernetes API (their label selector, the one provenance reads) and scrapes each pod's IP on its `http` port. Each
row of `server_metrics.jsonl` keeps the single-server format, so the accounting, the cross-check and the report read
it unchanged:

- `deltas` are the sum of each pod's own increments (a pod whose counter went down restarted: all of its new value
  counts), and `counters` / `histograms` are the fleet's running totals: the pods' values at the first scrape plus
  every delta since, so the last row minus the first is exactly what the replicas did in between, even across a
  restart;
- `gauges` sum over the pods read in this scrape (`kv_cache_usage_perc`, a share, is their mean);
- `pods` holds each pod's own gauges, or the error that kept it out of this scrape.

A pod that appears after the first scrape (a replacement) counts from zero: all of its counters are the run's. A pod
listed at the first scrape that could not be read then has its first successful read as its baseline. The pod list is
read again every `relist_s` seconds and whenever a pod cannot be read.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent

from slabench.evidence.scrape import AVERAGED, SCHEMA_VERSION, FetchError, NotPrometheus, Scraper, parse

Snapshot = dict[str, Any]  # scrape.parse's {"gauges", "counters", "histograms"}
RELIST_S = 10.0


def _increment(prev: Snapshot | None, cur: Snapshot) -> Snapshot:
    """What one pod did between two of its snapshots (`prev` None: all of `cur`). A counter or histogram that went
    down was reset by a restart: its whole new value counts."""
    prev_counters = (prev or {}).get("counters", {})
    counters = {}
    for name, value in cur.get("counters", {}).items():
        before = prev_counters.get(name, 0.0)
        counters[name] = value - before if value >= before else value
    prev_hists = (prev or {}).get("histograms", {})
    hists = {}
    for name, h in cur.get("histograms", {}).items():
        p = prev_hists.get(name)
        if p is None or h["count"] < p["count"]:
            p = {"count": 0.0, "sum": 0.0, "buckets": {}}
        buckets = {le: v - p["buckets"].get(le, 0.0) for le, v in h.get("buckets", {}).items()}
        hists[name] = {"count": h["count"] - p["count"], "sum": h["sum"] - p["sum"], "buckets": buckets}
    return {"counters": counters, "histograms": hists}


def _zero(snap: Snapshot) -> Snapshot:
    return {
        "counters": dict.fromkeys(snap.get("counters", {}), 0.0),
        "histograms": {
            k: {"count": 0.0, "sum": 0.0, "buckets": dict.fromkeys(h.get("buckets", {}), 0.0)}
            for k, h in snap.get("histograms", {}).items()
        },
    }


def _add(total: Snapshot, inc: Snapshot) -> None:
    counters = total.setdefault("counters", {})
    for name, v in inc["counters"].items():
        counters[name] = counters.get(name, 0.0) + v
    hists = total.setdefault("histograms", {})
    for name, h in inc["histograms"].items():
        t = hists.setdefault(name, {"count": 0.0, "sum": 0.0, "buckets": {}})
        t["count"] += h["count"]
        t["sum"] += h["sum"]
        for le, v in h["buckets"].items():
            t["buckets"][le] = t["buckets"].get(le, 0.0) + v


def _gauges(snaps: list[Snapshot]) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for snap in snaps:
        for name, v in snap.get("gauges", {}).items():
            values.setdefault(name, []).append(v)
    return {k: sum(v) / len(v) if k in AVERAGED else sum(v) for k, v in values.items()}


@dataclass
class Fleet:
    """The running totals over the serving pods (pure: snapshots in, rows' metric sections out)."""

    totals: Snapshot = field(default_factory=dict)
    last: dict[str, Snapshot] = field(default_factory=dict)  # each pod's last snapshot read
    baseline_pods: set[str] | None = None  # the pods listed at the first scrape

    def step(self, listed: set[str], snaps: dict[str, Snapshot]) -> dict[str, Any]:
        """Fold one scrape (the pods listed, and the snapshots of those read) into the totals; the row's
        gauges, counters, histograms and deltas."""
        first = self.baseline_pods is None
        if self.baseline_pods is None:
            self.baseline_pods = set(listed)
        deltas: Snapshot = {"counters": {}, "histograms": {}}
        for pod, snap in sorted(snaps.items()):
            prev = self.last.get(pod)
            if prev is None and (first or pod in self.baseline_pods):
                # its baseline: what it did before the run is not the run's (the first row's totals start at it)
                inc = _zero(snap)
                if first:
                    _add(self.totals, _increment(None, snap))
            else:
                inc = _increment(prev, snap)  # a pod new since the first scrape counts from zero
            _add(self.totals, inc)
            _add(deltas, inc)
            self.last[pod] = snap
        row_deltas: dict[str, Any] = dict(deltas["counters"])
        row_deltas.update({k: {"count": h["count"], "sum": h["sum"]} for k, h in deltas["histograms"].items()})
        return {
            "gauges": _gauges(list(snaps.values())),
            "counters": dict(self.totals.get("counters", {})),
            "histograms": {
                k: {**h, "buckets": dict(h["buckets"])} for k, h in self.totals.get("histograms", {}).items()
            },
            "deltas": row_deltas,
        }


class PodsScraper(Scraper):
    """Polls every serving pod's `/metrics` (found by `list_pods`: pod name → URL) and appends one fleet row per
    scrape. `run()` drives it as it drives a single-URL Scraper."""

    def __init__(
        self,
        list_pods: Callable[[], dict[str, str]],
        where: str,
        out: str | Path,
        run_id: str = "",
        timeout: float = 5.0,
        relist_s: float = RELIST_S,
    ) -> None:
        # No HTTP client of its own: one single-URL Scraper per pod fetches (with its own first-scrape timeout).
        self.url, self.out, self.run_id, self.timeout = where, Path(out), run_id, timeout
        self.list_pods, self.relist_s = list_pods, relist_s
        self.pods: dict[str, Scraper] = {}
        self.listed_at = -float("inf")
        self.fleet = Fleet()
        self._file: Any = None
        self.prev = None
        self.scrapes = 0
        self.failures = 0
        self.warned: set[str] = set()

    def _relist(self) -> None:
        try:
            urls = self.list_pods()
        except Exception as e:  # the API server: transient unless nothing was ever listed
            raise FetchError(f"listing them: {type(e).__name__}: {e}", permanent=not self.pods) from None
        self.listed_at = time.monotonic()
        for name in set(self.pods) - set(urls):
            self.pods.pop(name).close()
        for name, url in urls.items():
            if name in self.pods and self.pods[name].url != url:  # same name, new address: a new pod
                self.pods.pop(name).close()
            if name not in self.pods:
                self.pods[name] = Scraper(url, self.out, timeout=self.timeout)
        if not self.pods:
            raise FetchError("none of them is running", permanent=self.scrapes == 0)

    def _read(self, pod: Scraper) -> Snapshot | str:
        try:
            snap = parse(pod.fetch())
            pod.scrapes += 1
            return snap
        except (FetchError, NotPrometheus) as e:
            pod.failures += 1
            return f"{pod.url}: {e}"

    def scrape_once(self) -> dict[str, Any]:
        if time.monotonic() - self.listed_at >= self.relist_s:
            try:
                self._relist()
            except FetchError:
                if not self.pods:
                    raise
                # the API did not answer this time: scrape the pods known, list again at the next scrape
        t = time.time()
        names = sorted(self.pods)
        jobs = [gevent.spawn(self._read, self.pods[n]) for n in names]
        gevent.joinall(jobs)
        results = dict(zip(names, (j.value for j in jobs), strict=True))
        t_recv = time.time()
        snaps = {n: r for n, r in results.items() if isinstance(r, dict)}
        errors = {n: r for n, r in results.items() if isinstance(r, str)}
        if errors:
            self.listed_at = -float("inf")  # a pod may have gone: list again next time
        if not snaps:
            raise FetchError("; ".join(errors.values()), permanent=False)
        pods: dict[str, Any] = {n: {"gauges": s["gauges"]} for n, s in snaps.items()}
        pods.update({n: {"error": e} for n, e in errors.items()})
        row: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "run_id": self.run_id, "t": t, "t_recv": t_recv}
        row.update(self.fleet.step(set(names), snaps))
        row["pods"] = pods
        self._write(row)
        self.scrapes += 1
        return row

    def close(self) -> None:
        for pod in self.pods.values():
            pod.close()
        self.pods.clear()
        if self._file is not None:
            self._file.close()
            self._file = None


def main(argv: list[str] | None = None) -> int:
    """`python -m slabench.evidence.pod_scrape --pods SELECTOR ...`: the poller over the serving pods, driven by
    `slabench.locust.scrape` as the single-URL one is (same protocol on stdin/stdout)."""
    import argparse
    import sys

    from slabench.core.errors import UserError
    from slabench.evidence.provenance import kube_api, serving_pod_metrics_urls
    from slabench.evidence.scrape import add_poll_options, poll

    p = argparse.ArgumentParser(prog="python -m slabench.evidence.pod_scrape", description=__doc__.split("\n\n")[0])
    p.add_argument("--pods", required=True, help="label selector of the serving pods, e.g. app=vllm")
    p.add_argument("--namespace", default=None, help="their namespace (default: $POD_NAMESPACE, else this pod's)")
    add_poll_options(p)
    a = p.parse_args(argv)
    selector, namespace = a.pods, a.namespace
    api: list[Any] = []  # one API client for the whole run, made at the first listing (its errors are the lister's)

    def list_pods() -> dict[str, str]:
        if not api:
            api.append(kube_api(namespace)[0].api_client)
        return serving_pod_metrics_urls(selector, namespace, api[0])

    try:
        return poll(a, lambda: PodsScraper(list_pods, f"the serving pods {selector}", a.out, a.run_id))
    except UserError as e:
        print(f"slabench: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
