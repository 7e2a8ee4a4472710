"""The Locust side of the scraper: which URL, the poller's command line (where the API key may go), option checks."""

import socket
from pathlib import Path
from types import SimpleNamespace

import gevent
import pytest

from slabench.locust.scrape import ScrapeProcess, check_option, poller_argv, target_url


def env(server_metrics="", host="http://127.0.0.1:8000", user_hosts=()):
    opts = SimpleNamespace(server_metrics=server_metrics, server_metrics_interval=0.5, api_key_env="KEY_VAR")
    users = [SimpleNamespace(host=h) for h in user_hosts]
    return SimpleNamespace(parsed_options=opts, host=host, user_classes=users)


@pytest.mark.parametrize(
    ("e", "url"),
    [
        (env(), "http://127.0.0.1:8000/metrics"),
        (env(host="https://llm.example.com/v1"), "https://llm.example.com/metrics"),
        (env(server_metrics="http://10.1.2.3:8000/metrics"), "http://10.1.2.3:8000/metrics"),
        (env(server_metrics="OFF"), None),
        (env(host=None), None),
        (env(host=None, user_hosts=(None, "http://127.0.0.1:9000")), "http://127.0.0.1:9000/metrics"),
    ],
)
def test_target_url(e, url):
    assert target_url(e) == url


def test_the_api_key_goes_only_to_the_targets_own_host():
    opts = SimpleNamespace(server_metrics_interval=0.5, api_key_env="KEY_VAR", insecure=False)
    same = poller_argv("https://llm.example.com/metrics", Path("o.jsonl"), "r1", opts, "https://llm.example.com/v1")
    other = poller_argv("http://10.1.2.3:8000/metrics", Path("o.jsonl"), "r1", opts, "https://llm.example.com/v1")
    assert same[same.index("--api-key-env") + 1] == "KEY_VAR"
    assert "--api-key-env" not in other
    for argv in (same, other):
        assert argv[argv.index("--interval") + 1] == "0.5"
        assert argv[argv.index("--run-id") + 1] == "r1"
        assert "--stdin-control" in argv and "--insecure" not in argv
        assert not any("secret" in a for a in argv)


def test_insecure_is_passed_on():
    opts = SimpleNamespace(server_metrics_interval=1.0, api_key_env="", insecure=True)
    argv = poller_argv("https://h/metrics", Path("o.jsonl"), "r", opts, "https://h")
    assert "--insecure" in argv and "--api-key-env" not in argv


@pytest.mark.parametrize("value", ["", "off", "Off", "http://127.0.0.1:8000/metrics", "https://h.example/metrics"])
def test_valid_server_metrics_options(value):
    assert check_option(value) is None


@pytest.mark.parametrize("value", ["127.0.0.1:8000/metrics", "metrics", "ftp://h/metrics", "http:///metrics"])
def test_invalid_server_metrics_options_say_how_to_fix(value):
    assert "expected 'off', 'pods' or a URL like http://" in check_option(value)


SELECTOR = "app.kubernetes.io/instance=vllm-serving,app.kubernetes.io/component=server"


def test_pods_scrapes_each_serving_pod_found_by_their_labels(monkeypatch):
    opts = SimpleNamespace(server_metrics_interval=0.5, api_key_env="KEY_VAR", insecure=False)
    monkeypatch.setenv("SLABENCH_SERVING_SELECTOR", SELECTOR)  # what the Locust chart sets for slabench deploy
    for value in ("pods", f"pods:{SELECTOR}"):
        assert check_option(value) is None
        assert target_url(env(server_metrics=value)) == value
        argv = poller_argv(value, Path("o.jsonl"), "r1", opts, "http://vllm-serving.slabench.svc:8000")
        assert argv[1:5] == ["-m", "slabench.evidence.pod_scrape", "--pods", SELECTOR]
        assert "--api-key-env" not in argv  # pods are reached by IP; vLLM's key guards /v1 only
    monkeypatch.delenv("SLABENCH_SERVING_SELECTOR")
    assert "set SLABENCH_SERVING_SELECTOR" in check_option("pods")
    assert "give pods:SELECTOR" in check_option("pods: ")


def test_a_run_stopped_while_the_poller_starts_stops_it_without_a_second_reader(tmp_path):
    """A short run on a busy machine stops before the poller said ready: the start's read and the stop's read of its
    output must take turns (two at once raised "reentrant call" out of Locust's test_stop)."""
    silent = socket.socket()  # accepts connections, never answers: the baseline scrape waits
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    url = f"http://127.0.0.1:{silent.getsockname()[1]}/metrics"
    opts = SimpleNamespace(server_metrics_interval=0.2, api_key_env="", insecure=False)
    proc = ScrapeProcess(url, tmp_path / "server_metrics.jsonl", "r1", opts, None)
    starting = gevent.spawn(proc.wait_ready)
    gevent.sleep(0.5)  # the start now reads the poller's output, waiting for "ready"
    try:
        proc.stop()
        starting.join(timeout=30)
        assert proc.proc.poll() is not None  # the poller is gone
        assert starting.ready() and starting.exception is None
    finally:
        silent.close()
