"""The contract: the shipped example loads, the JSON Schema is generated from the models and up to date, and every
bad input is a clear error naming the file and line."""

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from slabench.core.errors import UserError
from slabench.sla.contract import Contract, load_contract
from slabench.sla.estimates import Level, LevelEstimates
from tests.helpers.sla_helpers import est, write

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "sla" / "config_sla_example.yaml"
CONTRACT_SCHEMA = ROOT / "sla" / "schema" / "sla.schema.json"

GOOD = """\
name: t
load:
  concurrency: 16
deployment:
  instance_type: g6e.xlarge
targets:
  ttft_p95_s: {max: 2.0}
quality:
  verbose:
    item_accuracy: {min: 0.85}
"""


def test_the_example_contract_loads_and_prices():
    lc = load_contract(EXAMPLE)
    c = lc.contract
    assert c.load.concurrency == 16 and c.deployment.instance_type == "g7e.2xlarge"
    assert lc.region == "us-east-1" and lc.replica.total_usd_per_hour == pytest.approx(3.36312)
    names = [s.name for s in c.checks()]
    assert {"ttft_p95_s", "itl_p95_s", "tpot_p95_s", "e2e_p95_s", "error_rate", "throughput_rps"} <= set(names)
    assert {"output_tokens_per_s", "cost_per_million_output_tokens_usd"} <= set(names)
    assert {f"quality.terse.{m}" for m in ("item_accuracy", "pass_agreement", "parse_rate")} <= set(names)
    assert c.capacity.target_load_rps == 103


def test_the_json_schema_accepts_the_example_and_rejects_a_typo():
    schema = json.loads(CONTRACT_SCHEMA.read_text(encoding="utf-8"))
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    jsonschema.validate(data, schema)
    data["targets"]["ttft_p95"] = {"max": 1.0}  # no `_s`: an editor flags it before grading does
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


def error_of(tmp_path, text) -> str:
    with pytest.raises(UserError) as e:
        load_contract(write(tmp_path, text))
    return str(e.value)


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize(
    ("edit", "needle", "says"),
    [
        (("ttft_p95_s: {max: 2.0}", "ttft_p59_s: {max: 2.0}"), "ttft_p59_s", "targets.ttft_p59_s: unknown key"),
        (("ttft_p95_s: {max: 2.0}", "ttft_p95_s: {max: -1}"), "ttft_p95_s", "greater than 0 (got -1"),
        (("ttft_p95_s: {max: 2.0}", "ttft_p95_s: {max: 2.0, severity: fatal}"), "ttft_p95_s", "'hard' or 'soft'"),
        (("item_accuracy: {min: 0.85}", "item_accuracy: {min: 85}"), "item_accuracy", "less than or equal to 1"),
        (("item_accuracy: {min: 0.85}", "item_acuracy: {min: 0.85}"), "item_acuracy", "unknown key"),
        (("concurrency: 16", "concurrency: 0"), "concurrency", "greater than or equal to 1"),
        (("instance_type: g6e.xlarge", "instance_type: g6e.xlarg"), "instance_type", "did you mean g6e.xlarge"),
        (("instance_type: g6e.xlarge", "instance_type: g6e.xlarge\n  replicas: 0"), "replicas", "replicas"),
    ],
)
def test_bad_input_names_the_line(tmp_path, edit, needle, says):
    text = GOOD.replace(*edit)
    msg = error_of(tmp_path, text)
    assert says in msg
    assert f"sla.yaml:{line_of(text, needle)}:" in msg, msg


def test_a_load_needs_exactly_one_kind(tmp_path):
    text = GOOD.replace("concurrency: 16", "concurrency: 16\n  scenario: burst")
    msg = error_of(tmp_path, text)
    assert "exactly one of concurrency, request_rate_rps, scenario" in msg and f":{line_of(text, 'load:')}:" in msg


def test_gpus_and_mig_are_exclusive(tmp_path):
    text = GOOD.replace("instance_type: g6e.xlarge", "instance_type: g7e.2xlarge\n  gpus_per_replica: 1\n"
                        "  mig: {profile: 2g.48gb}")  # fmt: skip
    assert "gpus_per_replica or mig, not both" in error_of(tmp_path, text)


def test_mig_on_the_wrong_gpu_names_the_profile_line(tmp_path):
    text = GOOD.replace("instance_type: g6e.xlarge", "instance_type: g6e.xlarge\n  mig:\n    profile: 2g.48gb")
    msg = error_of(tmp_path, text)
    assert f"sla.yaml:{line_of(text, 'profile:')}: deployment.mig.profile:" in msg and "L40S" in msg


def test_a_contract_without_checks_is_refused(tmp_path):
    text = "name: t\nload: {concurrency: 1}\ndeployment: {instance_type: g5.xlarge}\n"
    assert "nothing to grade" in error_of(tmp_path, text)


def test_unknown_region_and_missing_price_file(tmp_path):
    text = GOOD + "prices:\n  region: eu-west-1\n"
    msg = error_of(tmp_path, text)
    assert f"sla.yaml:{line_of(text, 'region:')}: prices.region:" in msg and "eu-west-1" in msg
    text = GOOD + "prices:\n  file: nowhere.yaml\n"
    msg = error_of(tmp_path, text)
    assert f"sla.yaml:{line_of(text, 'file:')}: prices.file:" in msg and "nowhere.yaml" in msg


def test_an_own_price_file_relative_to_the_contract_and_an_override(tmp_path):
    table = (ROOT / "slabench" / "sla" / "instance_prices.yaml").read_text(encoding="utf-8")
    (tmp_path / "prices").mkdir()
    (tmp_path / "prices" / "mine.yaml").write_text(table.replace("g6e.xlarge: 1.861", "g6e.xlarge: 1.5"))
    lc = load_contract(write(tmp_path, GOOD + "prices:\n  file: prices/mine.yaml\n"))
    assert lc.replica.per_replica_usd_per_hour == 1.5
    lc = load_contract(write(tmp_path, GOOD + "prices:\n  overrides_usd_per_hour: {g6e.xlarge: 1.1}\n"))
    assert lc.replica.per_replica_usd_per_hour == 1.1 and lc.replica.price_source == "contract override"
    msg = error_of(tmp_path, GOOD + "prices:\n  overrides_usd_per_hour: {g6e.xlarge: -1}\n")
    assert "greater than 0" in msg


def test_a_quality_floor_for_a_task_that_was_not_run_names_its_line(tmp_path):
    lc = load_contract(write(tmp_path, GOOD))
    ran_terse = [LevelEstimates(Level(concurrency=16), {"quality.terse.item_accuracy": est(0.9)})]
    with pytest.raises(UserError) as e:
        lc.check_tasks_ran(ran_terse)
    msg = str(e.value)
    assert f"sla.yaml:{line_of(GOOD, 'verbose:')}: quality.verbose:" in msg
    assert "tasks graded: terse" in msg
    with pytest.raises(UserError, match=r"none \(the records carry no quality fields\)"):
        lc.check_tasks_ran([LevelEstimates(Level(concurrency=16), {"ttft_p95": est(1.0), "e2e_p50": est(2.0)})])
    lc.check_tasks_ran([LevelEstimates(Level(concurrency=16), {"quality.verbose.parse_rate": est(1.0)})])
    # no request answered at all (a run cut short): no task could be graded, which is no mismatch
    lc.check_tasks_ran([LevelEstimates(Level(concurrency=16), {"ttft_p95": est(1.0), "e2e_p50": est(None)})])


def test_another_instance_type_is_priced_and_checked(tmp_path):
    lc = load_contract(write(tmp_path, GOOD))
    assert lc.with_instance_type("g5.xlarge").replica.total_usd_per_hour == pytest.approx(1.006)
    with pytest.raises(UserError, match=r"^--instance-type g5.xlarg: .*did you mean g5.xlarge"):
        lc.with_instance_type("g5.xlarg")


def test_task_names_cannot_break_metric_keys(tmp_path):
    msg = error_of(tmp_path, GOOD.replace("verbose:", "'verbose.v2':"))
    assert "quality.verbose.v2" in msg and re.search(r"sla\.yaml:\d+:", msg)


def test_the_model_is_strict_and_frozen():
    c = Contract.model_validate(yaml.safe_load(GOOD))
    with pytest.raises(Exception, match="frozen"):
        c.name = "x"  # type: ignore[misc]
