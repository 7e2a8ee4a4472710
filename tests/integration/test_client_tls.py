"""The streaming client over TLS, against the hostile server serving https with a certificate made here: reads over
TLS go through gevent's socket (its buffered bytes are invisible to a readable check), under the same stall timeout
as plain streams; and the certificate is verified unless the target says not to."""

from __future__ import annotations

import datetime
import ipaddress
import time
from pathlib import Path

import pytest

from slabench.core.client import StreamingClient, Target, chat_body
from slabench.core.record import RecordMeta
from tests.conftest import HostileServer


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> HostileServer:
    d = tmp_path_factory.mktemp("tls")
    s = HostileServer(d / "log.jsonl", tls=self_signed(d))
    yield s
    s.stop()


def self_signed(d: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = d / "cert.pem", d / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


def send(url: str, behaviour: str, **target):
    client = StreamingClient(Target(url, **target))
    body = chat_body("m", [{"role": "user", "content": "hi"}], 16)
    try:
        return client.send("chat", body, RecordMeta(run_id="tls"), headers={"X-Hostile": behaviour}).record
    finally:
        client.close()


def test_a_self_signed_certificate_is_refused_by_default(server):
    r = send(server.url, "ok")
    assert r.error_category == "connect"
    assert "certificate" in r.error_message.lower()


def test_a_stream_over_tls_is_whole(server):
    r = send(server.url, "ok", verify_tls=False)
    assert r.outcome == "ok", r.error_message
    assert r.completion_tokens == 3 and len(r.chunk_times) == 3


def test_a_tls_stream_slower_in_all_than_its_stall_timeout_is_not_a_stall(server):
    r = send(server.url, "slow_trickle", verify_tls=False, stall_timeout=0.45)  # 0.66 s, never 0.45 s silent
    assert r.outcome == "ok", r.error_message


def test_a_tls_stream_that_stalls_is_a_stall(server):
    r = send(server.url, "stall_mid_stream", verify_tls=False, stall_timeout=0.5)
    assert r.error_category == "stall"
    assert "no bytes for 0.5 s" in r.error_message


def test_a_locust_run_reaches_a_self_signed_server_with_insecure_only(server, tmp_path):
    from slabench.core.sinks import read_records
    from tests.helpers.locust_run import CHAT, assert_exit, run_users

    def run(name: str, *extra: str):
        records = tmp_path / name / "records.jsonl"
        res = run_users(
            CHAT, server.url, records, "--prompt-tokens", "16", "--max-tokens", "8", *extra, users=2, run_time="5s"
        )
        return res, list(read_records(records)) if records.exists() else []

    res, records = run("insecure", "--insecure")
    assert_exit(res.returncode, tmp_path / "insecure", 0, output=res.stderr)
    answered = [r for r in records if r.outcome == "ok"]
    assert answered and all(r.outcome == "ok" or r.error_category == "cancelled" for r in records)
    res, records = run("verified")
    assert res.returncode != 0
    assert "CERTIFICATE_VERIFY_FAILED" in res.stderr
    assert not any(r.outcome == "ok" for r in records)


@pytest.mark.parametrize(
    "behaviour,expect,message",
    [
        ("bom_first", "ok", None),
        ("tool_calls_only", "ok", None),
        ("done_trailing_space", "ok", None),
        ("head_trickle", "timeout", "no response head within 0.5 s"),
        ("reset_after_head", "stream_cut", "connection"),
        ("bad_chunk_size", "stream_cut", "HTTP framing broke"),
        ("usage_all_zero", "bad_usage", "usage says 0 completion tokens"),
    ],
)
def test_the_worst_hostile_behaviours_over_tls(server, behaviour, expect, message):
    r = send(server.url, behaviour, verify_tls=False, stall_timeout=0.5, request_timeout=10.0)
    assert (r.error_category or r.outcome) == expect, r.error_message
    if message is None:
        assert len(r.chunk_times) == 3 and r.completion_tokens == 3
    else:
        assert message in r.error_message


@pytest.mark.parametrize("behaviour,how", [("stale_echo_header", "X-Request-Id"), ("stale_chunk_id", "chunk id")])
def test_a_stale_answer_on_a_reused_tls_connection_is_not_this_requests(server, behaviour, how):
    client = StreamingClient(Target(server.url, verify_tls=False))
    body = chat_body("m", [{"role": "user", "content": "hi"}], 16)
    try:
        records = [
            client.send("chat", body, RecordMeta(run_id="tls"), headers={"X-Hostile": b}).record
            for b in (behaviour, behaviour, "ok")
        ]
    finally:
        client.close()
    assert [r.error_category or r.outcome for r in records] == ["ok", "stale_response", "ok"]
    assert how in records[1].error_message


def test_an_unasked_answer_on_an_idle_tls_connection_is_never_taken_for_the_next_requests(server):
    client = StreamingClient(Target(server.url, verify_tls=False))
    body = chat_body("m", [{"role": "user", "content": "hi"}], 16)
    mark = server.mark()
    try:
        records = []
        for behaviour in ("unasked_answer_while_idle", "echo_request_id"):
            records.append(client.send("chat", body, RecordMeta(run_id="tls"), headers={"X-Hostile": behaviour}).record)
            time.sleep(0.5)
    finally:
        client.close()
    assert [r.outcome for r in records] == ["ok", "ok"], records[1].error_message
    seen = server.requests(mark)
    assert [r["request_id"] for r in seen] == [r.request_id for r in records]
    assert seen[0]["conn"] != seen[1]["conn"]  # the connection that held the unasked bytes was not reused
