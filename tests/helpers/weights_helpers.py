"""Shared pieces for the weight-cache tests: tiny synthetic models, the CLI as a real process, S3 inspection."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from slabench.commands.cli import main
from tests.helpers.moto_server import MotoServer

REPO = Path(__file__).resolve().parents[2]
KB, MB = 1000, 1000 * 1000

# A model shaped like a real one (config, tokenizer, sharded safetensors, a nested file), but a few MB.
TINY_MODEL = {
    "config.json": 600,
    "tokenizer.json": 20 * KB,
    "model-00001-of-00002.safetensors": 1200 * KB,
    "model-00002-of-00002.safetensors": 700 * KB,
    "original/params.json": 300,
}


def write_model(root: Path, files: dict[str, int] = TINY_MODEL, seed: int = 0) -> dict[str, bytes]:
    """Deterministic pseudo-random files; returns their contents by relative path."""
    rng = random.Random(seed)
    out = {}
    for rel, size in files.items():
        data = rng.randbytes(size)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        out[rel] = data
    return out


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def cli(server: MotoServer, *args: str, timeout: float = 60, **popen):
    """Run `slabench ARGS` as its own process (the way the init container does), against the moto server."""
    env = {**os.environ, **server.env(), "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "slabench", *args], env=env, capture_output=True, text=True, timeout=timeout, **popen
    )


def run(*args: str) -> subprocess.CompletedProcess:
    """`slabench ARGS` in this process (faster than a subprocess where a process boundary does not matter).

    Needs the environment the `s3_server` fixture sets. Returns what `cli` returns: returncode, stdout, stderr.
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as e:  # argparse usage errors
            code = e.code
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def popen(server: MotoServer, *args: str) -> subprocess.Popen:
    env = {**os.environ, **server.env(), "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "slabench", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def visible_files(dest: Path) -> dict[str, bytes]:
    """What vLLM would see in the cache directory: every file outside `.slabench/`."""
    out = {}
    for p in dest.rglob("*"):
        rel = p.relative_to(dest).as_posix()
        if p.is_file() and not rel.startswith(".slabench/"):
            out[rel] = p.read_bytes()
    return out


@pytest.fixture(scope="module")
def s3_server() -> Iterator[MotoServer]:
    with MotoServer() as server, pytest.MonkeyPatch.context() as mp:
        for k, v in server.env().items():  # in-process boto3 clients (the tests' own and the code under test)
            mp.setenv(k, v)
        yield server


def s3_client():
    """A fresh client from the current environment (boto3's default session caches too much across tests)."""
    return boto3.session.Session().client("s3")


@pytest.fixture
def bucket(s3_server: MotoServer) -> str:
    name = f"weights-{uuid.uuid4().hex[:12]}"
    s3_client().create_bucket(Bucket=name)
    return name
