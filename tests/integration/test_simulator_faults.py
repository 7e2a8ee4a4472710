"""Every injected fault becomes the matching classified record, and the run goes on."""

from collections import Counter

from slabench.core.record import ErrorCategory, Outcome
from slabench.core.sinks import read_records
from tests.helpers.locust_run import CHAT, run_users

FAULTS = [
    "http_500=0.08",
    "http_503=0.08",
    "http_429=0.08",
    "reset=0.08",
    "stall=0.08",
    "malformed=0.08",
    "no_usage=0.08",
    "slow_start=0.08",
]


def test_faults_are_classified_and_the_run_continues(simulator, tmp_path):
    flags = [f for kv in FAULTS for f in ("--fault", kv)]
    url = simulator(
        "--ttft",
        "0.01",
        "--itl",
        "0.002",
        "--output-tokens",
        "20",
        "--stall-s",
        "1",
        "--slow-start-s",
        "0.4",
        "--seed",
        "7",
        *flags,
    )
    records_path = tmp_path / "r.jsonl"
    res = run_users(CHAT, url, records_path, "--stall-timeout", "0.5", users=6, run_time="6s", stop_timeout=3)
    assert "Traceback" not in res.stderr
    records = read_records(records_path)
    seen = Counter(
        (r.outcome, r.error_category, r.http_status if r.outcome is Outcome.ERROR else None) for r in records
    )
    expected = {
        (Outcome.ERROR, ErrorCategory.HTTP_5XX, 500),
        (Outcome.ERROR, ErrorCategory.HTTP_5XX, 503),
        (Outcome.ERROR, ErrorCategory.HTTP_4XX, 429),
        (Outcome.INCOMPLETE, ErrorCategory.STREAM_CUT, None),
        (Outcome.INCOMPLETE, ErrorCategory.STALL, None),
        (Outcome.ERROR, ErrorCategory.BAD_JSON, 200),
        (Outcome.INCOMPLETE, ErrorCategory.NO_USAGE, None),
        (Outcome.OK, None, None),
    }
    assert expected <= set(seen), seen
    ok = [r for r in records if r.outcome is Outcome.OK]
    assert len(ok) > len(records) / 4  # the run went on
    slow = [r for r in ok if r.first_byte - r.sent >= 0.4]
    assert slow, "slow_start faults delay the first byte"
