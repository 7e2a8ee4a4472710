"""Request accounting (records vs the server's count), worker spools, and the distributed port defaults."""

import json
from argparse import Namespace

import pytest

from slabench.core.errors import UserError
from slabench.core.record import ErrorCategory, Outcome, RequestRecord
from slabench.evidence.accounting import (
    MAYBE,
    NO,
    SURE,
    Tally,
    incomplete_reasons,
    reached_server,
    reconcile,
    server_received,
)
from slabench.locust.distributed import LOCUST_DEFAULT_PORT, resolve_ports
from slabench.locust.spool import Journal, read_journal, unaccounted


def rec(rid="a", outcome=Outcome.OK, cat=None, **kw):
    return RequestRecord(run_id="r", request_id=rid, outcome=outcome, error_category=cat, **kw)


@pytest.mark.parametrize(
    ("record", "reach"),
    [
        (rec(), SURE),
        (rec(outcome=Outcome.INCOMPLETE, cat=ErrorCategory.STREAM_CUT), SURE),
        (rec(outcome=Outcome.ERROR, cat=ErrorCategory.HTTP_5XX, http_status=503), SURE),
        (rec(outcome=Outcome.ERROR, cat=ErrorCategory.CONNECT), NO),
        (rec(outcome=Outcome.ERROR, cat=ErrorCategory.TIMEOUT, sent=1.0), MAYBE),
        (rec(outcome=Outcome.DROPPED, cat=ErrorCategory.CANCELLED, sent=1.0), MAYBE),
        (rec(outcome=Outcome.DROPPED, cat=ErrorCategory.CANCELLED, sent=1.0, first_byte=1.1), SURE),
        (rec(outcome=Outcome.DROPPED, cat=ErrorCategory.CANCELLED), NO),
        (rec(outcome=Outcome.DROPPED, cat=ErrorCategory.LOST_WITH_WORKER), MAYBE),
        (rec(outcome=Outcome.DROPPED, cat=ErrorCategory.NOT_SENT), NO),
    ],
)
def test_whether_a_request_reached_the_server(record, reach):
    assert reached_server(record) == reach


def scrape(received):
    return {"counters": {"requests_received_total": received}}


def test_server_count_is_the_rise_across_the_scrapes_and_survives_a_restart():
    assert server_received([scrape(10), scrape(15), scrape(40)]) == 30
    assert server_received([scrape(10), scrape(15), scrape(3)]) == 8  # restarted: counts from zero
    assert server_received([scrape(10)]) is None
    assert server_received([{"counters": {}}, {"counters": {}}]) is None


def test_reconcile_states_requests_the_records_do_not_cover():
    t = Tally()
    t.add([rec("a"), rec("b"), rec("c", Outcome.DROPPED, ErrorCategory.LOST_WITH_WORKER)])
    assert reconcile(t, 3.0)["unrecorded"] == 0
    gap = reconcile(t, 7.0)
    assert gap["unrecorded"] == 4 and "4 more than the records" in gap["note"]
    assert reconcile(t, None)["unrecorded"] is None


def test_a_redirect_loop_is_one_record_and_its_hops_not_unrecorded_requests():
    """A 308 loop given up after 5 hops reached the server 6 times; a followed 307 twice. The server's count of 8 is
    what the two records account for, not 6 requests of "a lost worker or another client"."""
    t = Tally()
    loop = rec("a", Outcome.ERROR, ErrorCategory.REDIRECT, http_status=308, redirects=5)
    t.add([loop, rec("b", redirects=1)])
    got = reconcile(t, 8.0)
    assert (got["records"], got["reached_server_surely"], got["redirects_followed"], got["unrecorded"]) == (2, 8, 6, 0)
    assert got["note"] == "every request the server received has a record"


def test_a_run_is_incomplete_when_nothing_was_answered_or_a_worker_was_lost():
    t = Tally()
    assert incomplete_reasons(t, {}) == ["no request was made"]
    t.add([rec("a", Outcome.ERROR, ErrorCategory.CONNECT)])
    assert incomplete_reasons(t, {}) == ["no request was answered"]
    t.add([rec("b"), rec("c", Outcome.DROPPED, ErrorCategory.NOT_SENT)])
    assert incomplete_reasons(t, {}) == ["1 request(s) not sent"]
    t2 = Tally()
    t2.add([rec("d"), rec("e", Outcome.DROPPED, ErrorCategory.CANCELLED, sent=1.0)])
    assert incomplete_reasons(t2, {}) == []  # requests cancelled at the end of a run are the run's normal end
    assert incomplete_reasons(t2, {"lost_workers": {"w1": {}}}) == ["1 worker(s) lost: w1"]


def test_a_journal_gives_records_and_stand_ins_with_the_real_request_ids(tmp_path):
    j = Journal(tmp_path / "run" / "w1.jsonl")
    meta = {"run_id": "r", "worker_id": "w1", "user_id": "w1/1", "item_id": "queue-00001", "scheduled": None}
    j.began({**meta, "request_id": "a", "started_wall": 100.0})
    j.record(rec("a", worker_id="w1").to_dict())
    j.began({**meta, "request_id": "b", "started_wall": 101.0})
    j.began({**meta, "request_id": "c", "started_wall": 102.0})
    j.record(rec("c", worker_id="w1").to_dict())
    with j.path.open("a") as f:
        f.write('{"began": {"request_id": "d", "run')  # killed mid-line
    contents = read_journal(j.path)
    assert [r["request_id"] for r in contents.records] == ["a", "c"]
    records, lost = unaccounted(contents, known={"a"}, message="lost")
    assert [r.request_id for r in records] == ["c"]
    (b,) = lost
    assert (b.request_id, b.worker_id, b.user_id, b.item_id, b.wall_sent) == ("b", "w1", "w1/1", "queue-00001", 101.0)
    assert b.error_category is ErrorCategory.LOST_WITH_WORKER and b.outcome is Outcome.DROPPED
    j.remove()
    assert not (tmp_path / "run").exists()


def test_a_broken_journal_line_names_the_file_and_line(tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_text(json.dumps(rec("a").to_dict()) + "\nnot json\n" + json.dumps(rec("b").to_dict()) + "\n")
    with pytest.raises(UserError, match=r"w\.jsonl:2: not a spool or records line"):
        read_journal(p)


@pytest.mark.parametrize(
    ("given", "bind", "connect"),
    [
        ({"processes": 2, "master_bind_port": 6000, "master_port": None}, 6000, 6000),  # the case
        ({"processes": 2, "master_bind_port": 6000, "master_port": 7000}, 6000, 7000),
        # plain --master/--worker keep Locust's default port
        ({"processes": None, "master_bind_port": None, "master_port": None}, LOCUST_DEFAULT_PORT, LOCUST_DEFAULT_PORT),
        ({"processes": 2, "worker": True, "master_bind_port": None, "master_port": None}, *[LOCUST_DEFAULT_PORT] * 2),
    ],
)
def test_forked_workers_connect_to_the_masters_port(given, bind, connect):
    opts = Namespace(**{"worker": False, **given})
    resolve_ports(opts)
    assert (opts.master_bind_port, opts.master_port) == (bind, connect)


def test_processes_without_ports_take_a_free_one_not_locusts_default():
    opts = Namespace(processes=2, worker=False, master_bind_port=None, master_port=None)
    resolve_ports(opts)
    assert opts.master_bind_port == opts.master_port != LOCUST_DEFAULT_PORT
