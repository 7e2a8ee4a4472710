"""The published JSON Schemas are current and describe what slabench really writes: a summary, a verdict and a run
status produced here validate against docs/*.schema.json; a verdict read back is typed, and one edited by hand is
one line."""

from __future__ import annotations

import json

import jsonschema
import pytest

from slabench.analysis.aggregate import aggregate
from slabench.analysis.summary import summary_json
from slabench.commands import published_schemas
from slabench.core.errors import UserError
from slabench.evidence.run_status import RunStatus, write_run_status
from slabench.sla.grade_run import grade_run_dir, write_verdict
from slabench.sla.verdict_file import load_verdict
from tests.helpers.analysis_helpers import rec, write_run

ROOT = published_schemas.ROOT


def test_every_published_schema_is_current():
    assert published_schemas.stale() == [], "run `python -m slabench.commands.published_schemas`"
    assert published_schemas.main(["--check"]) == 0


def schema(name: str) -> dict:
    return json.loads((ROOT / "docs" / name).read_text(encoding="utf-8"))


@pytest.fixture
def graded(tmp_path):
    sweep = tmp_path / "sweep"
    for repeat in (1, 2, 3):
        write_run(sweep, 4, repeat, [rec(float(i), ttft=0.1 + 0.01 * repeat) for i in range(40)])
    (sweep / "summary.json").write_text(summary_json(aggregate(sweep)))
    sla = tmp_path / "sla.yaml"
    sla.write_text(
        "name: c\nload: {concurrency: 4}\ndeployment: {instance_type: g6e.xlarge}\ncapacity: {target_load_rps: 50}\n"
        "targets:\n  ttft_p95_s: {max: 0.5}\n  throughput_rps: {min: 0.1}\n  cost_per_1000_calls_usd: {max: 100}\n"
    )
    return sweep, write_verdict(grade_run_dir(sweep, sla), sweep)


def test_what_slabench_writes_validates_against_the_published_schemas(graded, tmp_path):
    sweep, verdict_path = graded
    jsonschema.validate(json.loads((sweep / "summary.json").read_text()), schema("summary.schema.json"))
    jsonschema.validate(json.loads(verdict_path.read_text()), schema("verdict.schema.json"))
    write_run_status(tmp_path, RunStatus(run_id="r", records=3, outcomes={"ok": 3}))
    jsonschema.validate(json.loads((tmp_path / "run_status.json").read_text()), schema("run_status.schema.json"))


def test_a_verdict_reads_back_typed(graded):
    _, path = graded
    v = load_verdict(path)
    assert v.verdict == "PASS" and v.checks[0].check == "ttft_p95_s" and v.capacity.tested[0].level == "concurrency 4"
    assert v.deployment.total_usd_per_hour == pytest.approx(v.deployment.per_replica_usd_per_hour)


def test_a_verdict_edited_by_hand_is_one_line(graded):
    _, path = graded
    doc = json.loads(path.read_text())
    doc["verdict"] = "MOSTLY_PASS"
    path.write_text(json.dumps(doc))
    with pytest.raises(UserError, match=r"verdict\.json: verdict: Input should be 'PASS', 'CONDITIONAL' or 'FAIL'"):
        load_verdict(path)
