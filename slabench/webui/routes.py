"""The LLM view inside Locust's web UI (master or local runner only; workers have no UI).

What it adds, with Locust's supported extension points (`environment.web_ui.app` routes; the modern UI's
`extended_tabs` / `extended_tables` / `extended_csv_files` template arguments; `extended_stats` rows in the
/stats/requests answer the UI polls every 2 s):
- an "LLM" tab whose table Locust draws and refreshes itself, and, under it, the charts page (`static/llm.html`,
  self-contained: inline JS and SVG, no CDN) in a frame that `static/embed.js` places while the tab is open;
- ``<base>/slabench/``: the charts page on its own; ``live.json``: the snapshot (+ new chart points since ``?since=``);
  ``records.jsonl``: the records that have reached the master so far;
- the server's queue depth / running requests / KV usage, from the scrapes `slabench.locust.scrape` writes beside
  the records (its poller process; nothing scrapes inside this event loop);
- with ``--sla FILE`` (`slabench.locust.sla`), each check's provisional status, regraded from the records so far.

Records arrive through the record store's `listeners` (every record stored on the master or local runner: shipped
by workers, made locally, or lost with a worker). `install()` must run after `slabench.locust.plugin.install()`, so
the hub exists when this `init` listener runs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import gevent
from flask import Blueprint, Response, jsonify, request, send_file, stream_with_context
from locust import events
from locust.env import Environment
from locust.runners import WorkerRunner

from slabench.core.client import parse_base_url
from slabench.core.errors import UserError
from slabench.core.jsonl import json_line
from slabench.core.record import RequestRecord
from slabench.core.run_id import check_run_id
from slabench.core.sinks import check_records_path
from slabench.evidence.run_status import MeasurementPolicy, saturation_reasons
from slabench.locust.hooks import install_once
from slabench.locust.hub import RecordHub, find_hub
from slabench.locust.options import options
from slabench.locust.scrape import ScrapeProcess
from slabench.locust.sla import SlaHook
from slabench.webui import server_metrics, tab
from slabench.webui.live import DEFAULT_WINDOW_S, LiveAggregator, Series, series_point, stage_view

log = logging.getLogger("slabench.webui")

STATIC = Path(__file__).parent / "static"
SAMPLE_S = 2.0  # one chart point per this many seconds
SLA_MIN_S = 10.0  # regrade at most this often (and at most 1/5 of the time: grading reads every record so far)
SNAPSHOT_CACHE_S = 1.0  # the UI polls every 2 s; a big window costs ~0.1 s
View = TypeVar("View", bound=Callable[..., Any])  # a Flask view function


def add_options(parser: Any) -> None:
    g = parser.add_argument_group("slabench live web view")
    g.add_argument(
        "--live-window-s",
        type=float,
        default=DEFAULT_WINDOW_S,
        help="sliding window of the LLM tab's 'now' figures, seconds",
    )


class LiveView:
    """Per master/local runner: the aggregator fed by the hub, the chart series, the server and SLA readings."""

    def __init__(self, environment: Environment, hub: RecordHub) -> None:
        self.env = environment
        self.hub = hub
        opts = environment.parsed_options
        window_s = float(getattr(opts, "live_window_s", DEFAULT_WINDOW_S) or DEFAULT_WINDOW_S)
        self.agg = LiveAggregator(window_s)
        self.series = Series()
        self.sla: dict[str, Any] | None = None
        self._greenlets: list[gevent.Greenlet] = []
        self._cache: tuple[float, dict[str, Any]] | None = None
        self._scrape_file: Path | None = None  # kept after the poller stops: the run's last reading stays shown
        self._listener_failed = False

    # -- feeding -----------------------------------------------------------------------------------------------
    def on_record(self, record: RequestRecord) -> None:
        """Hub listener: must never raise (it runs inside the hub's record path)."""
        try:
            self.agg.add(record, time.time())
            self._cache = None
        except Exception:
            if not self._listener_failed:
                self._listener_failed = True
                log.exception("slabench: the live view could not take a record; the LLM tab may be incomplete")

    def start(self) -> None:
        self.stop_loops()
        self.agg.reset(time.time())
        self.series.clear()
        self.sla, self._cache, self._scrape_file = None, None, None
        self._greenlets = [gevent.spawn(self._sample_loop)]
        if self.sla_hook() is not None:
            self._greenlets.append(gevent.spawn(self._sla_loop))

    def stop(self) -> None:
        self.agg.stop(time.time())
        self.stop_loops()
        self._cache = None
        self._greenlets = [gevent.spawn(self._final)]

    def stop_loops(self) -> None:
        for g in self._greenlets:
            g.kill(block=False)
        self._greenlets = []

    def reset_stats(self) -> None:
        """Locust's "reset stats": start the figures afresh within the same run."""
        self.agg.reset(time.time())
        self.series.clear()
        self._cache = None

    # -- what the runner knows -----------------------------------------------------------------------------------
    def in_flight(self) -> int | None:
        if self.hub.intake is not None:  # the master: what the workers last reported
            return sum(len(v) for v in self.hub.intake.inflight_seen.values())
        return len(self.hub.run.inflight)

    def stage(self) -> dict[str, Any] | None:
        """The shape's stage now (when this process knows it), else None: the aggregator then uses the latest
        record's."""
        fn = self.hub.stage_fn
        if fn is None or self.agg.stopped is not None:
            return None
        try:
            s = fn() or {}
        except Exception:
            return None
        return stage_view(s.get("stage_level"), s.get("stage_unit"), s.get("stage_repeat"), s.get("stage_phase"))

    def records_path(self) -> Path | None:
        path: Path | None = self.hub.store.path
        return path

    def server(self) -> dict[str, Any] | None:
        """The latest scrape of the run's poller (`slabench.locust.scrape`), or None when none runs for this run."""
        poller = self.hub.parts.get(ScrapeProcess)
        if poller is not None:
            self._scrape_file = Path(poller.out)
        if self._scrape_file is None:
            return None
        return server_metrics.reading(server_metrics.last_line(self._scrape_file), str(self._scrape_file))

    def sla_hook(self) -> SlaHook | None:
        return self.hub.parts.get(SlaHook)  # put by slabench.locust.sla when --sla is given

    # -- the loops -----------------------------------------------------------------------------------------------
    def _sample_loop(self) -> None:
        while True:
            gevent.sleep(SAMPLE_S)
            self.sample()

    def sample(self) -> None:
        snap = self.snapshot()
        self.series.append(series_point(snap, snap["server"]))

    def _sla_loop(self) -> None:
        self.sla = {"provisional": True, "pending": True, "records": 0, "checks": []}
        while True:
            if not self.agg.total_records:
                gevent.sleep(SAMPLE_S)  # nothing to grade yet: a verdict on no records says nothing
                continue
            if self.sla.get("pending"):
                gevent.sleep(SAMPLE_S)  # let a few more batches in than the very first
            took = self.regrade()
            gevent.sleep(max(SLA_MIN_S, 5 * took))

    def regrade(self) -> float:
        """Grade the records so far against the contract; returns how long it took."""
        hook, path = self.sla_hook(), self.records_path()
        if hook is None or path is None:
            return 0.0
        from slabench.core.sinks import read_records
        from slabench.webui.sla_live import provisional_status

        t0 = time.monotonic()
        try:
            self.hub.store.flush()
            records = read_records(path) if path.exists() else []
            self.sla = provisional_status(hook.loaded, records, hook.run_level())
        except Exception as e:  # provisional only: say why there is no status, never disturb the run
            self.sla = {"provisional": True, "error": f"cannot grade the records so far: {e}"[:300]}
        self._cache = None
        return time.monotonic() - t0

    def _final(self) -> None:
        """After stop: the last chart point and provisional grade, for the run as it ended."""
        self.sample()
        self.regrade()

    # -- what the pages read -------------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        now = time.time()
        if self._cache is not None and now - self._cache[0] < SNAPSHOT_CACHE_S:
            return self._cache[1]
        snap = self.agg.snapshot(now, in_flight=self.in_flight(), stage=self.stage())
        snap["server"] = self.server()
        self._cache = (now, snap)
        return snap

    def payload(self, since: int) -> dict[str, Any]:
        snap = self.snapshot()
        return {
            **snap,
            "run_id": self.hub.run.run_id,
            "state": str(self.env.runner.state) if self.env.runner else None,
            "lost_workers": dict(self.hub.intake.lost_workers) if self.hub.intake is not None else {},
            "saturation": self.saturation(),
            "sla": self.sla,
            "series": self.series.since(since),
            "series_seq": self.series.last_seq,
        }

    def saturation(self) -> list[str]:
        """The load generator's saturation so far, judged by the default measurement policy (the final verdict
        judges it by the contract's)."""
        return saturation_reasons(self.hub.saturation.snapshot(), MeasurementPolicy())

    def tab_rows(self) -> list[dict[str, str]]:
        snap = self.snapshot()
        return tab.rows(snap, snap["server"], self.sla)

    def records_jsonl(self) -> Iterator[bytes]:
        """The records stored so far, one JSON object a line (only whole lines: the sink may be mid-write)."""
        path = self.records_path()
        self.hub.store.flush()
        if path is None or not path.exists():
            return
        if path.is_dir():  # a Parquet run: its finished parts, as JSON lines
            import pyarrow.parquet as pq

            from slabench.core.sinks import ARROW_SCHEMA

            for part in sorted(path.glob("part-*.parquet")):
                for row in pq.read_table(part, schema=ARROW_SCHEMA).to_pylist():
                    yield json_line(RequestRecord.from_dict(row).to_dict())
            return
        size = path.stat().st_size  # what is there now; the file keeps growing while we send
        with path.open("rb") as f:
            left, tail = size, b""
            while left > 0:
                chunk = f.read(min(1 << 16, left))
                if not chunk:
                    break
                left -= len(chunk)
                chunk, tail = tail + chunk, b""
                cut = chunk.rfind(b"\n") + 1
                chunk, tail = chunk[:cut], chunk[cut:]
                if chunk:
                    yield chunk


def _auth(web_ui: Any) -> Callable[[View], View]:
    """Locust's login check on a view (Locust's web UI is not annotated)."""
    auth: Callable[[View], View] = web_ui.auth_required_if_enabled
    return auth


def blueprint(view: LiveView, web_ui: Any, base: str) -> Blueprint:
    bp = Blueprint("slabench_live", __name__, url_prefix=f"{base}/slabench")
    auth = _auth(web_ui)

    @bp.route("/")
    @auth
    def page() -> Response:
        return send_file(STATIC / "llm.html", mimetype="text/html", max_age=0)

    @bp.route("/embed.js")
    @auth
    def embed() -> Response:
        return send_file(STATIC / "embed.js", mimetype="application/javascript", max_age=0)

    @bp.route("/live.json")
    @auth
    def live() -> Response:
        try:
            since = int(request.args.get("since", "0"))
        except ValueError:
            since = 0
        return jsonify(view.payload(since))

    @bp.route("/records.jsonl")
    @auth
    def records() -> Response:
        name = f"{view.hub.run.run_id or 'run'}-records-so-far.jsonl"
        return Response(
            stream_with_context(view.records_jsonl()),
            mimetype="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"},
        )

    return bp


def _extend_template_args(web_ui: Any, window_s: float) -> None:
    """The tab, its table's columns and the download links, appended to whatever other extensions added."""
    ta = web_ui.template_args
    ta["extended_tabs"] = [*ta.get("extended_tabs", []), {"title": tab.TAB_TITLE, "key": tab.TAB_KEY}]
    ta["extended_tables"] = [
        *ta.get("extended_tables", []),
        {"key": tab.TAB_KEY, "structure": tab.structure(window_s)},
    ]
    ta["extended_csv_files"] = [
        *ta.get("extended_csv_files", []),
        {"href": "./slabench/records.jsonl", "title": "Download LLM records so far (JSONL)"},
        {"href": "./slabench/", "title": "LLM live view (full page)"},
    ]


EMBED_TAG = b'<script src="./slabench/embed.js"></script>'


def _after_request(view: LiveView) -> Any:
    def extend(response: Response) -> Response:
        try:
            _extend_response(view, response)
        except Exception:  # never break Locust's own UI over the LLM tab
            log.exception("slabench: could not add the LLM tab to %s", request.path)
        return response

    return extend


def _extend_response(view: LiveView, response: Response) -> None:
    endpoint = request.endpoint
    if endpoint == "locust.request_stats" and response.is_json:
        data = response.get_json()
        rows = {"key": tab.TAB_KEY, "data": view.tab_rows()}
        data["extended_stats"] = [*(data.get("extended_stats") or []), rows]
        response.set_data(json.dumps(data))
    elif endpoint == "locust.index" and response.mimetype == "text/html" and not response.is_streamed:
        body = response.get_data()
        if EMBED_TAG not in body:
            response.set_data(body.replace(b"</body>", EMBED_TAG + b"</body>", 1))


def _host_problem(form: Any) -> str | None:
    """Locust's start form sets the target from its host field as it is: an emptied or malformed one would start a
    run of users that can only fail."""
    if "host" not in form:
        return None
    host = str(form["host"]).strip()
    if not host:
        return "the host field is empty: give the server's URL, e.g. http://127.0.0.1:8000"
    try:
        parse_base_url(host)
    except UserError as e:
        return str(e).replace("--host", "host", 1)
    return None


def _before_swarm(environment: Environment, web_ui: Any) -> Any:
    """A start from the form is refused, with the reason shown in the form, when its host field is empty or not a
    URL, its run id is not a plain name (`../../x` would write outside runs/), or when it would add a run to a
    records file holding an earlier one (the same checks as on the command line; the form's values are not applied
    yet)."""

    @_auth(web_ui)  # say nothing about paths to whoever is not logged in
    def refuse_bad_start() -> Response | None:
        opts, form = options(environment), request.form
        problem = _host_problem(form)
        if problem is not None:
            log.error("slabench: not started: %s", problem)
            return jsonify({"success": False, "message": f"Not started: {problem}", "host": environment.host})
        append = form["append"] == "true" if "append" in form else bool(getattr(opts, "append", False))
        try:
            if form.get("run_id"):
                check_run_id(str(form["run_id"]), "run id")
            check_records_path(form.get("records", opts.records), form.get("run_id", opts.run_id), append)
        except UserError as e:
            log.error("slabench: %s", e)
            return jsonify({"success": False, "message": str(e), "host": environment.host})
        return None

    def check() -> Response | None:
        if request.endpoint == "locust.swarm" and request.method == "POST":
            return refuse_bad_start()
        return None

    return check


def _on_init(environment: Environment, runner: Any = None, web_ui: Any = None, **_: Any) -> None:
    web_ui = web_ui or getattr(environment, "web_ui", None)
    if runner is None or web_ui is None or isinstance(runner, WorkerRunner):
        return
    hub = find_hub(environment)
    if hub is None:
        log.warning("slabench: no record hub; the LLM tab is off (install slabench first)")
        return
    view = LiveView(environment, hub)
    hub.parts.put(view)  # the view, for whoever holds the hub
    hub.store.listeners.append(view.on_record)
    hub.run_started.append(view.start)
    hub.run_ended.append(view.stop)  # the final figures and grade read the closed records
    base = getattr(environment.parsed_options, "web_base_path", "") or ""
    web_ui.app.register_blueprint(blueprint(view, web_ui, base))
    web_ui.app.after_request(_after_request(view))
    web_ui.app.before_request(_before_swarm(environment, web_ui))
    _extend_template_args(web_ui, view.agg.window_s)
    environment.events.reset_stats.add_listener(view.reset_stats)  # that event carries no environment


def install(hooks: Any = events) -> None:
    """Register the live view on Locust's event hooks (idempotent, like `slabench.locust.plugin.install`)."""
    install_once(hooks, "webui", add_options, _on_init)
