"""The slabench-monitoring chart (observability/): the Grafana dashboard as Grafana's sidecar loads it, and alert
rules that kube-prometheus-stack selects — rendered by the real helm."""

from __future__ import annotations

import json

import pytest

from tests.helpers import platform_helpers
from tests.helpers.platform_helpers import ROOT, helm_template, one, render

helm_bin = platform_helpers.helm_bin
pytestmark = pytest.mark.usefixtures("helm_bin")
CHART = ROOT / "observability"


def rules(docs: list[dict]) -> dict[str, dict]:
    rule = one(docs, "PrometheusRule")
    return {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}


def test_the_dashboard_ships_unchanged_with_the_sidecar_label():
    cm = one(render(CHART, api_versions=()), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    shipped = (CHART / "dashboards" / "slabench-fleet.json").read_text()
    assert json.loads(cm["data"]["slabench-fleet.json"]) == json.loads(shipped)


def test_alerts_are_selected_by_kube_prometheus_stack_and_cover_queue_mig_and_limits():
    docs = render(CHART, api_versions=())
    assert one(docs, "PrometheusRule")["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    by_name = rules(docs)
    assert set(by_name) == {"SlabenchVllmQueueBacklog", "SlabenchVllmKvCacheFull", "SlabenchVllmTargetDown",
                            "SlabenchNodePoolNearLimit", "SlabenchMigSlicingFailed",
                            "SlabenchMigPendingTooLong"}  # fmt: skip
    assert by_name["SlabenchVllmQueueBacklog"]["expr"] == "sum by (namespace) (vllm:num_requests_waiting) > 32"
    assert 'label_nvidia_com_mig_config_state="failed"' in by_name["SlabenchMigSlicingFailed"]["expr"]
    assert 'key="slabench.io/mig-pending"' in by_name["SlabenchMigPendingTooLong"]["expr"]
    # Prometheus templates in annotations survive Helm's templating.
    assert "{{ $labels.namespace }}" in by_name["SlabenchVllmQueueBacklog"]["annotations"]["summary"]


def test_thresholds_and_routing_labels_come_from_values():
    docs = render(CHART, values_files=(CHART / "ci" / "routing-values.yaml",), api_versions=())
    backlog = rules(docs)["SlabenchVllmQueueBacklog"]
    assert backlog["expr"].endswith("> 8") and backlog["for"] == "5m"
    assert backlog["labels"] == {"severity": "warning", "team": "ml-platform"}


def test_a_bad_duration_is_refused_by_the_schema():
    proc = helm_template(CHART, set_values=("alerts.queueFor=ten minutes",))
    assert proc.returncode != 0 and "queueFor" in proc.stderr
