"""Run a sweep: one real `locust --headless` process per (level, repeat), one after another.

Layout written under ``<output_dir>/<sweep-id>/``:

    sweep.json                       config, versions, host, git revision, target, plan, status
    <level>/<repeat>/records.jsonl   the run's records (the bridge's sink)
    <level>/<repeat>/locust_*.csv    Locust's own CSVs (the live view's numbers; never used for figures)
    <level>/<repeat>/locust.log      Locust's output
    <level>/<repeat>/manifest.json   the exact command, timings, exit code, record count, status
    summary.json, report.md, report.html, plots/   the report (when the sweep finishes)

A run counts as done only when its manifest says ``"status": "complete"``; Ctrl-C stops the current run, marks it
interrupted and leaves finished runs intact; ``--resume`` re-runs only what is not complete. Without a target URL,
one embedded simulator serves the whole sweep, so every repeat hits the same server — except inside a Kubernetes pod,
where a sweep without a target is refused: there it would grade the simulator and read like a verdict on the fleet.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from slabench.core.boundary import loads
from slabench.core.errors import ExitCode, UserError
from slabench.core.runcap import capped
from slabench.core.schema import SWEEP, SWEEP_RUN, FileSchema
from slabench.evidence import provenance
from slabench.sim.cli import sim_args_to_argv
from slabench.sim.embedded import EmbeddedSimulator
from slabench.sweep.config import SweepConfig

ROOT = Path(__file__).resolve().parents[2]
STAGE_PLUGIN = Path(__file__).with_name("locust_stage.py")
STARTUP_S = 3.0  # rough per-run start-up (python + locust import, users spawning) for the ETA
STOP_GRACE_S = 20.0


@dataclass(frozen=True)
class PlannedRun:
    index: int
    level: int
    repeat: int
    seed: int

    @property
    def key(self) -> str:
        return f"{self.level}/{self.repeat}"


def plan(cfg: SweepConfig) -> list[PlannedRun]:
    """Level by level, repeats back to back (repeats of a level are then seconds apart, like the team's runs)."""
    out: list[PlannedRun] = []
    for level in cfg.levels:
        for repeat in range(1, cfg.repeats + 1):
            i = len(out)
            out.append(PlannedRun(i, level, repeat, cfg.seed + i if cfg.seed_policy == "per_run" else cfg.seed))
    return out


def git_revision() -> str | None:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return None


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("slabench", "locust", "gevent", "numpy", "pyarrow"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def host_facts() -> dict[str, Any]:
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "cpus": os.cpu_count()}


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically (temp + rename): a manifest is either the old one or the new one, never half."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_json(path: Path, schema: FileSchema) -> dict[str, Any] | None:
    """A sweep.json or manifest.json; None when missing or unreadable (the run is then redone), an error when it is
    of another kind or version (slabench.core.schema): never guess what another version's fields mean."""
    try:
        data = loads(path.read_text(encoding="utf-8"))  # NaN or Infinity: unreadable, the run is redone
    except (OSError, ValueError):
        return None
    schema.check(data, str(path))  # a mapping of this schema, or it raises
    return dict(data)


# -- the target --------------------------------------------------------------------------------------------------
def in_kubernetes_pod() -> bool:
    """Kubernetes sets KUBERNETES_SERVICE_HOST in every container (also with enableServiceLinks: false)."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def refuse_simulator_in_cluster(config_path: Path) -> None:
    if in_kubernetes_pod():
        raise UserError(
            f"{config_path}: target.url is not set and no --target-url was given: inside a Kubernetes pod this sweep "
            "would benchmark the embedded simulator, not your server — pass --target-url http://<vllm-service>:8000 "
            "(slabench deploy does) or set target.url"
        )


def _tls(insecure: bool) -> ssl.SSLContext | None:
    if not insecure:
        return None  # urllib's default: verified
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def check_target(url: str, insecure: bool = False, timeout: float = 5.0) -> None:
    """Fail fast with a clear message when nothing answers at `url` (any HTTP answer counts as up)."""
    try:
        with urllib.request.urlopen(f"{url}/v1/models", timeout=timeout, context=_tls(insecure)) as resp:
            resp.read(1)
    except urllib.error.HTTPError:
        return  # it answered (401/404/...): up; the runs will record what goes wrong
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise UserError(
            f"target {url} is not reachable ({reason}); start the server, or fix target.url "
            "(leave it out to use the embedded simulator)"
        ) from None


def fresh_prefix_cache(url: str, insecure: bool, api_key_env: str, salt: str, timeout: float = 10.0) -> dict[str, str]:
    """Before a run, empty the server's prefix cache, so a repeat measures the card and not the cache the run before
    it filled: vLLM's POST /reset_prefix_cache (served in its dev mode, VLLM_SERVER_DEV_MODE=1). Where the server
    has no such endpoint, the run's prompts start with `[salt]` instead (`--prompt-salt`), which no earlier run's
    cached blocks match. Returns what was done, for the run's manifest."""
    req = urllib.request.Request(f"{url.rstrip('/')}/reset_prefix_cache", data=b"", method="POST")
    key = os.environ.get(api_key_env)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=_tls(insecure)) as resp:
            return {"method": "reset", "detail": f"POST /reset_prefix_cache: HTTP {resp.status}"}
    except urllib.error.HTTPError as e:
        why = f"POST /reset_prefix_cache: HTTP {e.code}"
    except (urllib.error.URLError, OSError) as e:
        why = f"POST /reset_prefix_cache: {getattr(e, 'reason', e)}"
    return {"method": "salted", "salt": salt, "detail": f"{why}; every prompt starts with [{salt}] instead"}


def start_simulator(cfg: SweepConfig, log_path: Path) -> EmbeddedSimulator:
    """One simulator for the whole sweep, its messages in `log_path`; in dev mode, so each run can start with its
    prefix cache emptied (`fresh_prefix_cache`)."""
    s = cfg.simulator
    options = {**s.model_dump(exclude={"args"}), "seed": cfg.seed}
    return EmbeddedSimulator([*sim_args_to_argv(options), "--dev-mode", *s.args], log=log_path)


# -- one run -----------------------------------------------------------------------------------------------------
def locust_argv(cfg: SweepConfig, run: PlannedRun, run_dir: Path, run_id: str, url: str) -> list[str]:
    r = cfg.run
    argv = [sys.executable, "-m", "locust", "-f", f"{cfg.locustfile},{STAGE_PLUGIN}", "--headless", "--only-summary"]
    argv += ["-u", str(run.level), "-r", f"{r.spawn_rate or run.level:g}", "--host", url]
    records = run_dir / f"records.{r.records_format}"
    argv += ["--records", str(records), "--csv", str(run_dir / "locust"), "--run-id", run_id]
    argv += ["--stage-level", str(run.level), "--stage-repeat", str(run.repeat), "--exit-code-on-error", "0"]
    argv += ["--api-key-env", cfg.target.api_key_env, "--stop-timeout", f"{r.stop_timeout_s:g}"]
    if r.duration_s is not None:
        argv += ["-t", f"{capped(r.duration_s):g}s"]
    else:
        argv += ["--stop-after-requests", str(r.requests)]
        if (limit := capped(r.max_duration_s)) is not None:
            argv += ["-t", f"{limit:g}s"]
    if r.processes > 1:
        argv += ["--processes", str(r.processes)]
    if cfg.target.insecure:
        argv.append("--insecure")
    if cfg.model:
        argv += ["--model", cfg.model]
    if cfg.seed_flag:
        argv += [cfg.seed_flag, str(run.seed)]
    for key, value in cfg.locust_options.items():
        if value is True:
            argv.append(f"--{key}")
        elif value is not False:
            argv += [f"--{key}", str(value)]
    return argv


def count_records(path: Path) -> tuple[int, int]:
    """(records, records that failed to connect) in a run's records, without parsing every field."""
    if not path.exists():
        return 0, 0
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        from slabench.core.sinks import ARROW_SCHEMA

        col = pq.read_table(path, columns=["error_category"], schema=ARROW_SCHEMA).column("error_category")
        return len(col), col.to_pylist().count("connect")
    n = connect = 0
    with path.open("rb") as f:
        for line in f:
            if line.strip():
                n += 1
                connect += b'"error_category":"connect"' in line
    return n, connect


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop a locust process and whatever it forked (--processes): SIGTERM lets it write its records first."""
    for sig, wait in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


class SweepRunner:
    def __init__(
        self,
        cfg: SweepConfig,
        config_path: Path,
        sweep_dir: Path,
        console: Console | None = None,
        on_run_done: Callable[[PlannedRun, dict[str, Any]], None] | None = None,
        target_source: str = "config",
    ) -> None:
        self.cfg = cfg
        self.target_source = target_source  # where target.url came from: "config" or "--target-url"
        self.config_path = config_path
        self.dir = sweep_dir
        self.console = console or Console(stderr=True)
        self.on_run_done = on_run_done
        self.sweep_id = sweep_dir.name
        self.meta: dict[str, Any] = {}

    # -- bookkeeping -----------------------------------------------------------------------------------------
    def run_dir(self, run: PlannedRun) -> Path:
        return self.dir / str(run.level) / str(run.repeat)

    def is_complete(self, run: PlannedRun) -> bool:
        m = read_json(self.run_dir(run) / "manifest.json", SWEEP_RUN)
        return m is not None and m.get("status") == "complete"

    def _write_sweep(self, status: str, **extra: Any) -> None:
        self.meta.update(status=status, updated_at=_now(), **extra)
        write_json(self.dir / "sweep.json", self.meta)

    def _start_meta(self, resumed: bool) -> None:
        old = read_json(self.dir / "sweep.json", SWEEP) or {}
        self.meta = {
            **SWEEP.stamp(),
            "sweep_id": self.sweep_id,
            "config_file": str(self.config_path),
            "config": self.cfg.model_dump(mode="json"),
            "levels": self.cfg.levels,
            "repeats": self.cfg.repeats,
            "created_at": old.get("created_at", _now()),
            "resumed_at": [*old.get("resumed_at", []), _now()] if resumed else [],
            "git_revision": git_revision(),
            "versions": versions(),
            "host": host_facts(),
            "target_url": self.cfg.target.url,
            "target": self._target(),
        }

    def _target(self, simulator_url: str | None = None) -> dict[str, Any]:
        """What this sweep measured: a server (and how it was named), or the embedded simulator."""
        url: str | None
        if self.cfg.target.url:
            kind, url, source = "server", self.cfg.target.url, self.target_source
        else:
            kind, url, source = "simulator", simulator_url, "embedded simulator"
        return {"kind": kind, "url": url, "source": source, "in_cluster": in_kubernetes_pod()}

    # -- the sweep -------------------------------------------------------------------------------------------
    def run(self, resumed: bool = False) -> str:
        """Run every planned run that is not complete. Returns "complete" or "interrupted"."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self._start_meta(resumed)
        todo = [r for r in plan(self.cfg) if not self.is_complete(r)]
        skipped = self.cfg.repeats * len(self.cfg.levels) - len(todo)
        if skipped and resumed:
            self.console.print(f"resuming {self.sweep_id}: {skipped} run(s) already complete, {len(todo)} to go")
        sim = None
        try:
            if self.cfg.target.url:
                check_target(self.cfg.target.url, self.cfg.target.insecure)
                url = self.cfg.target.url
                t = self.cfg.target
                self.meta["provenance"] = provenance.collect(url, t.api_key_env, t.insecure)
            else:
                refuse_simulator_in_cluster(self.config_path)
                sim = start_simulator(self.cfg, self.dir / "simulator.log")
                url = sim.url
                self.meta["simulator"] = {"url": url, "argv": sim.argv[1:]}
                self.meta["target"] = self._target(url)
            self._write_sweep("running")
            self._run_all(todo, url)
        except KeyboardInterrupt:
            self._write_sweep("interrupted")
            return "interrupted"
        except UserError:
            self._write_sweep("failed")
            raise
        finally:
            if sim is not None:
                sim.stop()
        self._write_sweep("complete", finished_at=_now())
        return "complete"

    def _run_all(self, todo: list[PlannedRun], url: str) -> None:
        per_run = (self.cfg.run.duration_s or 0.0) + STARTUP_S
        columns = [
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("runs"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        ]
        with Progress(*columns, console=self.console, transient=False) as progress:
            task = progress.add_task(self.sweep_id, total=len(todo))
            for i, run in enumerate(todo):
                progress.update(task, description=f"{self.sweep_id} level {run.level} repeat {run.repeat}")

                def tick(frac: float, done: int = i) -> None:
                    progress.update(task, completed=done + frac)

                manifest = self._run_one(run, url, tick, per_run)
                progress.update(task, completed=i + 1)
                cache = {"reset": "prefix cache reset", "salted": "prompts salted", "kept": "prefix cache kept"}
                progress.console.print(
                    f"level {run.level:>4} repeat {run.repeat}: {manifest['records']} records in "
                    f"{manifest['wall_s']:.1f} s ({manifest['connect_errors']} connect errors; "
                    f"{cache[manifest['prefix_cache']['method']]})"
                )
                if self.on_run_done is not None:
                    self.on_run_done(run, manifest)

    def _run_one(self, run: PlannedRun, url: str, tick: Callable[[float], None], expected_s: float) -> dict[str, Any]:
        rdir = self.run_dir(run)
        if rdir.exists():  # an interrupted or failed attempt: start clean
            shutil.rmtree(rdir)
        rdir.mkdir(parents=True)
        # each attempt its own id: a repeat run again is another run (a summary of the first no longer describes it)
        run_id = f"{self.sweep_id}-L{run.level}-r{run.repeat}-{uuid.uuid4().hex[:6]}"
        argv = locust_argv(self.cfg, run, rdir, run_id, url)
        cache = {"method": "kept", "detail": "run.prefix_cache: keep"}
        if self.cfg.run.prefix_cache == "fresh":
            target, salt = self.cfg.target, f"{self.sweep_id} L{run.level} r{run.repeat}"
            cache = fresh_prefix_cache(url, target.insecure, target.api_key_env, salt)
            if "salt" in cache:
                argv += ["--prompt-salt", cache["salt"]]
        manifest: dict[str, Any] = {
            **SWEEP_RUN.stamp(),
            "sweep_id": self.sweep_id,
            "run_id": run_id,
            "level": run.level,
            "repeat": run.repeat,
            "seed": run.seed,
            "warmup_s": self.cfg.run.warmup_s,
            "duration_s": self.cfg.run.duration_s,
            "requests": self.cfg.run.requests,
            "target_url": url,
            "prefix_cache": cache,
            "argv": argv[1:],
            "started_at": _now(),
            "status": "running",
            # self-contained: a run directory copied on its own still says what produced it
            "config": self.meta.get("config"),
            "git_revision": self.meta.get("git_revision"),
            "versions": self.meta.get("versions"),
            "host": self.meta.get("host"),
        }
        write_json(rdir / "manifest.json", manifest)
        t0 = time.monotonic()
        with (rdir / "locust.log").open("w", encoding="utf-8") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                while proc.poll() is None:
                    time.sleep(0.25)
                    tick(min((time.monotonic() - t0) / expected_s, 0.99) if expected_s > STARTUP_S else 0.0)
            except KeyboardInterrupt:
                _stop_group(proc)
                manifest.update(status="interrupted", finished_at=_now(), wall_s=time.monotonic() - t0)
                write_json(rdir / "manifest.json", manifest)
                raise
        records, connect = count_records(rdir / f"records.{self.cfg.run.records_format}")
        manifest.update(
            finished_at=_now(),
            wall_s=time.monotonic() - t0,
            exit_code=proc.returncode,
            records=records,
            connect_errors=connect,
        )
        if proc.returncode == ExitCode.INCOMPLETE:  # the run finished; why it is incomplete is in its run_status.json
            self.console.print(f"level {run.level} repeat {run.repeat}: {_last_line(rdir / 'locust.log')}")
        elif proc.returncode != 0:
            manifest["status"] = "failed"
            write_json(rdir / "manifest.json", manifest)
            raise UserError(
                f"locust exited with code {proc.returncode} at level {run.level} repeat {run.repeat}: "
                f"{_last_line(rdir / 'locust.log')} (full output: {rdir / 'locust.log'})"
            )
        if records and connect == records:
            manifest["status"] = "failed"
            write_json(rdir / "manifest.json", manifest)
            raise UserError(
                f"the target {url} went down: every request of level {run.level} repeat {run.repeat} failed to "
                f"connect; fix the server, then continue with --resume {self.dir}"
            )
        manifest["status"] = "complete"
        write_json(rdir / "manifest.json", manifest)
        return manifest


def _last_line(path: Path) -> str:
    """The line that says why locust stopped: slabench's own stop line if there is one, else its line saying why the
    run is incomplete (exit 4: lost workers, saturation), else the last error line, else the last line."""
    try:
        lines = [x for x in path.read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
    except OSError:
        return "no output"
    for said in ("slabench: stopping the run:", "slabench: the run is incomplete"):  # why it stopped, or exits 4
        own = [x for x in lines if said in x]
        if own:
            return own[-1][own[-1].index(said) + len("slabench: ") :].strip()
    errors = [x for x in lines if "/ERROR/" in x or x.startswith("slabench")]
    return (errors or lines or ["no output"])[-1].strip()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
