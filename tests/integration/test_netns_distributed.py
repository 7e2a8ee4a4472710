"""Distributed mode across real network interfaces, as on EKS: the master, two workers and the simulator each in
its own network namespace on this machine, wired to a bridge that lives in a fifth namespace, on a private /24 that
exists only inside them (nothing is added to the host's own namespace, and nothing leaves this machine).

The real `locust` command runs in each (`--master --master-bind-host <ip>`, `--worker --master-host <ip>`,
`--host http://<simulator ip>:8000`) with `locustfiles/chat_replay.py`: Locust's ZeroMQ ports, slabench's custom
messages (run id, record batches, final counts) and the record shipping all cross veth interfaces. Proof: the records
the master wrote are exactly the requests the simulator received (its own counter, scraped inside its namespace),
no duplicates, from both workers; and the master's interface carried the traffic.

Needs CAP_NET_ADMIN (creating namespaces, veths, a bridge); skipped with the kernel's answer otherwise. Everything
is created by the test and removed afterwards, also on failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from slabench.core.record import Outcome
from slabench.core.sinks import read_records
from tests.helpers.locust_run import assert_exit
from tests.helpers.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = str(ROOT / "locustfiles" / "chat_replay.py")
SUBNET = "10.213.77"  # a /24 that exists only inside the test's namespaces
NODES = {"master": 1, "w1": 2, "w2": 3, "sim": 4}
MASTER_PORT = int(free_port())  # a port, like every master of ours, that no other run on the machine holds
SIM_PORT = 8000


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=30)


@dataclass
class Net:
    ns: dict[str, str]  # node → namespace name

    def ip(self, node: str) -> str:
        return f"{SUBNET}.{NODES[node]}"

    def exec_argv(self, node: str, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns[node], *argv]

    def bytes(self, node: str, direction: str) -> int:
        """Bytes the node's eth0 has sent ("tx") or received ("rx")."""
        out = run("ip", "-n", self.ns[node], "-s", "-j", "link", "show", "eth0").stdout
        return int(json.loads(out)[0]["stats64"][direction]["bytes"])


def _refusal() -> str | None:
    """Why this machine cannot host the test, or None."""
    if shutil.which("ip") is None:
        return "iproute2 `ip` is not installed"
    probe = f"sbprobe{os.getpid()}"
    res = run("ip", "netns", "add", probe, check=False)
    if res.returncode != 0:
        return f"the kernel refuses network namespaces here (needs CAP_NET_ADMIN): {res.stderr.strip()}"
    run("ip", "netns", "del", probe, check=False)
    return None


@pytest.fixture
def net() -> Iterator[Net]:
    why = _refusal()
    if why:
        pytest.skip(why)
    tag = f"sb{os.getpid() % 100000}"  # unique per test process: other sessions may run this test too
    ns = {node: f"{tag}-{node}" for node in NODES}
    bridge_ns = f"{tag}-br"
    created: list[str] = []
    try:
        for name in (*ns.values(), bridge_ns):
            run("ip", "netns", "add", name)
            created.append(name)
        run("ip", "-n", bridge_ns, "link", "add", "br0", "type", "bridge")
        run("ip", "-n", bridge_ns, "link", "set", "br0", "up")
        for node, name in ns.items():
            port = f"p-{node}"
            # The veth is born in the bridge's namespace with its peer (eth0) in the node's: the host's own
            # namespace never sees either end.
            run("ip", "-n", bridge_ns, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", name)
            run("ip", "-n", bridge_ns, "link", "set", port, "master", "br0", "up")
            run("ip", "-n", name, "addr", "add", f"{SUBNET}.{NODES[node]}/24", "dev", "eth0")
            run("ip", "-n", name, "link", "set", "eth0", "up")
            run("ip", "-n", name, "link", "set", "lo", "up")
        yield Net(ns)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"the kernel refused to build the test network: {' '.join(e.cmd)}: {e.stderr.strip()}")
    finally:
        for name in reversed(created):  # deleting a namespace deletes the veth ends and the bridge in it
            run("ip", "netns", "del", name, check=False)


class Procs:
    """Processes started in the namespaces; each in its own session so its whole group can be stopped."""

    def __init__(self, logdir: Path) -> None:
        self.logdir = logdir
        self.started: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], cwd: Path) -> subprocess.Popen:
        log = (self.logdir / f"{name}.log").open("w")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        p = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.started.append((name, p))
        return p

    def log(self, name: str) -> str:
        return (self.logdir / f"{name}.log").read_text()

    def stop_all(self) -> None:
        for _, p in self.started:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
        for _, p in self.started:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    ps = Procs(tmp_path)
    try:
        yield ps
    finally:
        ps.stop_all()


def wait_for_line(procs: Procs, name: str, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in procs.log(name):
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} did not print {text!r}:\n{procs.log(name)[-2000:]}")


def scrape_in(net: Net, node: str, url: str) -> dict[str, float]:
    """Prometheus samples fetched from inside a namespace, summed over labels."""
    code = f"import urllib.request,sys; sys.stdout.write(urllib.request.urlopen({url!r}, timeout=5).read().decode())"
    text = run(*net.exec_argv(node, sys.executable, "-c", code)).stdout
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def test_master_workers_and_simulator_on_separate_hosts(net: Net, procs: Procs, tmp_path: Path) -> None:
    sim_url = f"http://{net.ip('sim')}:{SIM_PORT}"
    procs.start(
        "sim",
        net.exec_argv("sim", sys.executable, "-m", "slabench", "simulate", "--host", net.ip("sim"),
                      "--port", str(SIM_PORT), "--ttft", "0.02", "--itl", "0.003", "--output-tokens", "16"),
        tmp_path,
    )  # fmt: skip
    wait_for_line(procs, "sim", "slabench simulator listening on", 30)
    records_path = tmp_path / "records.jsonl"
    rx_before = net.bytes("master", "rx")
    master = procs.start(
        "master",
        net.exec_argv("master", sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--master",
                      "--master-bind-host", net.ip("master"), "--master-bind-port", str(MASTER_PORT),
                      "--expect-workers", "2", "--expect-workers-max-wait", "40", "--headless", "--only-summary",
                      "-u", "8", "-r", "8", "-t", "6s", "--stop-timeout", "5", "--host", sim_url,
                      "--prompt-tokens", "64", "--records", str(records_path)),
        tmp_path,
    )  # fmt: skip
    for w in ("w1", "w2"):
        (tmp_path / w).mkdir()  # each worker's own working directory (its spool, if any, lands there)
        procs.start(
            w,
            net.exec_argv(w, sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--worker",
                          "--master-host", net.ip("master"), "--master-port", str(MASTER_PORT)),
            tmp_path / w,
        )  # fmt: skip
    try:
        rc = master.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the master did not finish:\n{procs.log('master')[-3000:]}")
    assert_exit(rc, tmp_path, 0, output=procs.log("master"))  # or 4 where a busy machine froze it, as it says

    records = read_records(records_path)
    assert len(records) > 20, procs.log("master")[-2000:]
    ids = Counter(r.request_id for r in records)
    assert not [i for i, n in ids.items() if n > 1], "duplicate records"
    received = scrape_in(net, "sim", f"{sim_url}/metrics")["slabench_sim_requests_received_total"]
    assert len(records) == received  # every request the simulator saw is one record on the master, no more
    assert all(r.outcome is Outcome.OK for r in records)  # --stop-timeout lets in-flight requests finish
    assert len({r.worker_id for r in records}) == 2  # both workers' batches crossed to the master
    assert len({r.run_id for r in records}) == 1  # the master's run id reached both workers
    # The batches came in over the master's eth0: it received at least a good part of the records' size (they
    # travel as msgpack, more compact than the JSON lines on disk).
    assert net.bytes("master", "rx") - rx_before > 0.3 * records_path.stat().st_size
