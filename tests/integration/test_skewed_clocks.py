"""Two Locust worker processes whose monotonic clocks read hours apart (as on two EKS nodes): the run's window and its
latencies come out as on one clock. The case of records without a wall anchor among them (not sent, lost with a
worker) is in tests/unit/test_analysis_columns.py."""

from slabench.analysis.columns import read_table, run_arrays
from slabench.core.sinks import read_records
from tests.helpers.locust_run import assert_exit, run_locust


def test_worker_processes_with_clocks_hours_apart_share_one_window(simulator, tmp_path):
    url = simulator("--ttft", "0.02", "--itl", "0.002", "--output-tokens", "8")
    records = tmp_path / "run" / "records.jsonl"
    res = run_locust(
        "-f", "tests/locustfiles/skewed_clock_locustfile.py,shapes/burst.py", "--host", url, "--processes", "2",
        "--burst-time-scale", "20", "--burst-stride", "100", "--records", str(records), timeout=180,
    )  # fmt: skip
    assert_exit(res.returncode, records.parent, 0, output=res.stderr)  # 4 only for a busy machine (not the point)
    recs = read_records(records)
    workers = {r.worker_id for r in recs}
    assert len(workers) == 2
    starts = {w: min(r.sent for r in recs if r.worker_id == w) for w in workers}
    assert max(starts.values()) - min(starts.values()) > 60  # the two monotonic clocks really are apart
    arrays = run_arrays(read_table(records))
    assert 3.0 < arrays.duration_s < 120  # 200 items over ~10 s: one window, not hours
    assert 0 < float(arrays.ttft.max()) < 30
