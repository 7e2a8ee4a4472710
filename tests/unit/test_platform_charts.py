"""What matters in the rendered vLLM and Locust charts, asserted on real `helm template` output (helm 4 from PyPI)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from slabench.locust.distributed import LOCUST_DEFAULT_PORT
from tests.helpers import platform_helpers
from tests.helpers.platform_helpers import (
    LOCUST,
    ROOT,
    SERVING,
    container,
    env_of,
    get_helm,
    helm_template,
    one,
    pod_spec,
    render,
)

helm_bin = platform_helpers.helm_bin  # session fixture: fetches helm with .ci/get-helm
pytestmark = pytest.mark.usefixtures("helm_bin")

SLA = "config.sla=name: qa"

# Inside the cluster the master listens on Locust's default ports (its own pod: nothing else there can hold them).
MASTER_PORT, WEB_PORT = LOCUST_DEFAULT_PORT, 8089


# --- vLLM serving ---------------------------------------------------------------------------------------------------


def test_server_requests_a_gpu_and_tolerates_the_gpu_taint_on_any_pool():
    dep = one(render(SERVING), "Deployment")
    vllm = container(dep, "vllm")
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert vllm["resources"]["requests"]["nvidia.com/gpu"] == "1"
    tolerations = pod_spec(dep)["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    # No pinning to a card or pool by default: whole cards and MIG slices are both plain nvidia.com/gpu.
    assert "nodeSelector" not in pod_spec(dep)
    assert "affinity" not in pod_spec(dep)


def test_gpu_count_wins_over_a_gpu_entry_in_resources():
    dep = one(render(SERVING, "gpu.count=2", "resources.limits.nvidia\\.com/gpu=7"), "Deployment")
    assert container(dep, "vllm")["resources"]["limits"]["nvidia.com/gpu"] == "2"


def test_mig_scenario_pins_to_the_g7e_pool_and_keeps_the_same_gpu_request():
    dep = one(render(SERVING, values_files=(SERVING / "ci" / "g7e-mig-values.yaml",)), "Deployment")
    assert pod_spec(dep)["nodeSelector"] == {
        "karpenter.sh/nodepool": "gpu-g7e-mig",
        "nvidia.com/mig.config": "all-2g.48gb",
    }
    assert container(dep, "vllm")["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_startup_readiness_and_liveness_probes_all_hit_health():
    vllm = container(one(render(SERVING), "Deployment"), "vllm")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert vllm[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    startup = vllm["startupProbe"]
    # Model load + compile on a cold node: the startup budget is generous, liveness only starts after it.
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 20 * 60
    assert vllm["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


def test_a_saturated_server_is_neither_taken_out_nor_restarted():
    """Under a sweep's top level /health answers late: the only replica stays in the Service for a minute of late
    answers, and is restarted only after three (a restart is a cold start)."""
    vllm = container(one(render(SERVING), "Deployment"), "vllm")
    ready, live = vllm["readinessProbe"], vllm["livenessProbe"]
    assert ready["timeoutSeconds"] >= 10 and live["timeoutSeconds"] >= 10
    assert ready["periodSeconds"] * ready["failureThreshold"] >= 60
    assert live["periodSeconds"] * live["failureThreshold"] >= 180


def test_vllm_args_come_from_values_and_serve_the_host_cache_path(tmp_path):
    values = tmp_path / "v.yaml"
    values.write_text(
        "model: {name: org/m, revision: abc123, servedName: grader, maxModelLen: 4096, gpuMemoryUtilization: 0.85,"
        " extraArgs: [--seed, '7']}\n"
    )
    docs = render(SERVING, values_files=(values,))
    args = container(one(docs, "Deployment"), "vllm")["args"]
    pairs = dict(zip(args[::2], args[1::2], strict=False))
    assert pairs["--model"] == "/models/org/m/abc123"
    assert pairs["--served-model-name"] == "grader"
    assert pairs["--max-model-len"] == "4096"
    assert pairs["--gpu-memory-utilization"] == "0.85"
    assert pairs["--port"] == "8000"
    assert args[-2:] == ["--seed", "7"]


def test_hf_offline_and_cache_envs_are_fixed_and_cannot_be_overridden():
    vllm = container(one(render(SERVING), "Deployment"), "vllm")
    env = env_of(vllm)
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["TRANSFORMERS_OFFLINE"] == "1"
    proc = helm_template(SERVING, set_values=("env.HF_HUB_OFFLINE=0",))
    assert proc.returncode != 0
    assert "env.HF_HUB_OFFLINE is set by the chart" in proc.stderr


def test_weight_cache_init_container_hydrates_a_host_path_under_the_nvme_mount():
    dep = one(render(SERVING, "weightCache.bucket=my-models", "weightCache.prefix=w/v1", "model.name=org/m",
                     "model.revision=r1", "aws.region=eu-west-1"), "Deployment")  # fmt: skip
    hydrate = container(dep, "hydrate-weights", init=True)
    assert hydrate["command"] == [
        "slabench", "weights", "hydrate",
        "--source", "s3://my-models/w/v1/org/m/r1",
        "--dest", "/mnt/k8s-disks/0/models/org/m/r1",
    ]  # fmt: skip
    assert env_of(hydrate)["AWS_REGION"] == "eu-west-1"
    volumes = {v["name"]: v for v in pod_spec(dep)["volumes"]}
    host = volumes["model-cache"]["hostPath"]
    assert host["path"].startswith("/mnt/k8s-disks/0/")
    assert host["type"] == "DirectoryOrCreate"
    # The server reads the same host directory, read-only.
    mount = next(m for m in container(dep, "vllm")["volumeMounts"] if m["name"] == "model-cache")
    assert mount == {"name": "model-cache", "mountPath": "/models", "readOnly": True}
    # hydrate runs after the ownership step, which is the only root container and only has CAP_CHOWN.
    names = [c["name"] for c in pod_spec(dep)["initContainers"]]
    assert names == ["prepare-cache", "hydrate-weights"]
    prep = container(dep, "prepare-cache", init=True)
    assert prep["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    assert prep["command"] == ["chown", "10001:10001", "/mnt/k8s-disks/0/models"]


def test_cache_outside_the_nvme_mount_is_rejected_by_the_schema():
    proc = helm_template(SERVING, set_values=("weightCache.hostRoot=/var/lib/models",))
    assert proc.returncode != 0
    assert "hostRoot" in proc.stderr


def test_unknown_values_keys_are_errors():
    proc = helm_template(SERVING, set_values=("modell.name=x",))
    assert proc.returncode != 0
    assert "modell" in proc.stderr


def test_server_and_init_containers_run_non_root_read_only_without_capabilities():
    dep = one(render(SERVING), "Deployment")
    pod = pod_spec(dep)["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == 10001
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in (container(dep, "vllm"), container(dep, "hydrate-weights", init=True)):
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod_spec(dep)["automountServiceAccountToken"] is False


def test_dev_shm_is_memory_backed():
    dep = one(render(SERVING), "Deployment")
    shm = next(v for v in pod_spec(dep)["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container(dep, "vllm")["volumeMounts"]


def test_ingress_is_an_alb_with_ip_targets_health_checks_and_a_long_idle_timeout():
    ing = one(render(SERVING), "Ingress")
    ann = ing["metadata"]["annotations"]
    assert ing["spec"]["ingressClassName"] == "alb"
    assert ann["alb.ingress.kubernetes.io/target-type"] == "ip"  # readiness gates act on pod IP targets
    assert ann["alb.ingress.kubernetes.io/healthcheck-path"] == "/health"
    assert ann["alb.ingress.kubernetes.io/success-codes"] == "200"
    assert ann["alb.ingress.kubernetes.io/load-balancer-attributes"] == "idle_timeout.timeout_seconds=600"
    backend = ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": "t-vllm-serving", "port": {"name": "http"}}


def test_https_scenario_listens_on_443_with_the_certificate():
    ing = one(render(SERVING, values_files=(SERVING / "ci" / "whole-card-values.yaml",)), "Ingress")
    ann = ing["metadata"]["annotations"]
    assert ann["alb.ingress.kubernetes.io/listen-ports"] == '[{"HTTPS": 443}]'
    assert ann["alb.ingress.kubernetes.io/certificate-arn"].startswith("arn:aws:acm:")
    assert ann["alb.ingress.kubernetes.io/inbound-cidrs"] == "10.20.0.0/16"


def test_readiness_gate_check_ships_as_a_helm_test_with_a_read_only_role():
    docs = render(SERVING)
    pod = one(docs, "Pod", "t-vllm-serving-test-readiness-gates")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert container(pod, "check")["command"] == ["python3", "/scripts/check_readiness_gates.py"]
    assert env_of(container(pod, "check"))["POD_SELECTOR"] == (
        "app.kubernetes.io/name=vllm-serving,app.kubernetes.io/instance=t,app.kubernetes.io/component=server"
    )
    role = one(docs, "Role")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]
    server_test = one(docs, "Pod", "t-vllm-serving-test-server")
    assert env_of(container(server_test, "check"))["SERVER_URL"] == "http://t-vllm-serving:8000"


def test_service_monitor_needs_both_the_flag_and_the_crd():
    assert one(render(SERVING), "ServiceMonitor")["spec"]["endpoints"][0]["path"] == "/metrics"
    assert one(render(SERVING), "ServiceMonitor")["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    without_crd = render(SERVING, api_versions=())
    assert not [d for d in without_crd if d["kind"] == "ServiceMonitor"]
    flag_off = render(SERVING, "serviceMonitor.enabled=false")
    assert not [d for d in flag_off if d["kind"] == "ServiceMonitor"]


def test_irsa_role_and_api_key_secret():
    docs = render(SERVING, "serviceAccount.roleArn=arn:aws:iam::123456789012:role/read", "apiKey.secretName=k")
    sa = one(docs, "ServiceAccount", "t-vllm-serving")
    assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/read"}
    env = env_of(container(one(docs, "Deployment"), "vllm"))
    assert env["VLLM_API_KEY"] == {"secretKeyRef": {"name": "k", "key": "api-key"}}


def test_pdb_lets_karpenter_drain_a_single_replica_and_pods_are_not_disrupted_mid_run():
    docs = render(SERVING)
    assert one(docs, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    dep = one(docs, "Deployment")
    assert dep["spec"]["template"]["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"


def test_server_network_policy_admits_only_port_8000_from_known_sources():
    docs = render(SERVING)
    deny = one(docs, "NetworkPolicy", "t-vllm-serving-default-deny")
    assert deny["spec"]["policyTypes"] == ["Ingress"] and "ingress" not in deny["spec"]
    server = one(docs, "NetworkPolicy", "t-vllm-serving-server")
    (rule,) = server["spec"]["ingress"]
    assert rule["ports"] == [{"port": 8000, "protocol": "TCP"}]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}} in rule["from"]


def test_minimal_scenario_has_only_the_server():
    docs = render(SERVING, values_files=(SERVING / "ci" / "minimal-values.yaml",))
    assert sorted(d["kind"] for d in docs) == ["Deployment", "Service"]
    dep = one(docs, "Deployment")
    assert [c["name"] for c in pod_spec(dep)["initContainers"]] == ["hydrate-weights"]
    assert pod_spec(dep)["serviceAccountName"] == "default"


# --- Locust ---------------------------------------------------------------------------------------------------------


def test_web_mode_runs_a_master_deployment_and_worker_deployment_on_the_cpu_pool():
    docs = render(LOCUST)
    master, workers = one(docs, "Deployment", "t-locust-master"), one(docs, "Deployment", "t-locust-workers")
    assert container(master, "master")["args"][:3] == ["locust", "-f", "locustfiles/qa_grading.py"]
    assert "--master" in container(master, "master")["args"]
    assert workers["spec"]["replicas"] == 4
    wargs = container(workers, "worker")["args"]
    assert wargs[wargs.index("--master-host") + 1] == "t-locust-master"
    assert container(workers, "worker")["resources"]["requests"]["cpu"] == "1"
    for w in (master, workers):
        spec = pod_spec(w)
        assert spec["nodeSelector"] == {"karpenter.sh/nodepool": "cpu-locust"}
        assert {"key": "slabench.io/dedicated", "operator": "Equal", "value": "locust", "effect": "NoSchedule"} in (
            spec["tolerations"]
        )
    svc = one(docs, "Service")
    assert {p["port"] for p in svc["spec"]["ports"]} == {MASTER_PORT, WEB_PORT}


def test_headless_burst_is_a_job_with_the_exact_ci_command_line():
    docs = render(LOCUST, "mode=headless", SLA, "apiKey.secretName=key", "results.s3Uri=s3://bkt/runs/1/",
                  "workers.replicas=3", "headless.users=50", "headless.spawnRate=5", "headless.runTime=3m")  # fmt: skip
    job = one(docs, "Job", "t-locust-master")
    master = container(job, "master")
    assert master["command"] == ["/bin/sh", "/scripts/run-job.sh"]
    assert master["args"] == [
        "locust", "-f", "locustfiles/qa_grading.py", "--api-key-env", "OPENAI_API_KEY",
        "--master", "--expect-workers", "3", "--headless", "--expect-workers-max-wait", "600",
        "-u", "50", "-r", "5", "-t", "3m", "--host", "http://vllm-serving:8000",
        "--records", "/results/records.jsonl", "--sla", "/config/sla.yaml",
    ]  # fmt: skip
    assert env_of(master)["RESULTS_S3_URI"] == "s3://bkt/runs/1/"
    assert "OPENAI_API_KEY" not in env_of(master)  # the master only coordinates
    assert job["spec"]["backoffLimit"] == 0  # a verdict is never retried
    assert pod_spec(job)["restartPolicy"] == "Never"
    workers = one(docs, "Job", "t-locust-workers")
    assert workers["spec"]["parallelism"] == workers["spec"]["completions"] == 3
    assert env_of(container(workers, "worker"))["OPENAI_API_KEY"] == {"secretKeyRef": {"name": "key", "key": "api-key"}}
    cm = one(docs, "ConfigMap", "t-locust-config")
    assert cm["data"]["sla.yaml"].strip() == "name: qa"
    mounts = {m["mountPath"]: m for m in container(job, "master")["volumeMounts"]}
    assert mounts["/config"]["readOnly"] is True


def test_a_shape_is_loaded_by_master_and_workers_and_replaces_users_rate_and_run_time():
    """The seed's burst in the cluster: `shape` adds shapes/burst.py to -f everywhere (the workers run its open-loop
    dispatcher), and the headless master passes no -u/-r/-t — the queue decides the load and when the run ends."""
    docs = render(LOCUST, "mode=headless", SLA, "shape=shapes/burst.py", "workers.replicas=8",
                  "headless.extraArgs={--burst-kind,gamma}")  # fmt: skip
    master = container(one(docs, "Job", "t-locust-master"), "master")
    worker = container(one(docs, "Job", "t-locust-workers"), "worker")
    assert master["args"] == [
        "locust", "-f", "locustfiles/qa_grading.py,shapes/burst.py", "--master", "--expect-workers", "8",
        "--headless", "--expect-workers-max-wait", "600", "--host", "http://vllm-serving:8000",
        "--records", "/results/records.jsonl", "--sla", "/config/sla.yaml", "--burst-kind", "gamma",
    ]  # fmt: skip
    assert worker["args"][:3] == ["locust", "-f", "locustfiles/qa_grading.py,shapes/burst.py"]


def test_several_locustfiles_are_accepted_but_a_shape_among_them_is_named_for_what_it_is():
    ok = helm_template(LOCUST, set_values=(r"locustfile=locustfiles/qa_grading.py\,locustfiles/chat_replay.py",))
    assert ok.returncode == 0, ok.stderr
    assert "locustfiles/qa_grading.py,locustfiles/chat_replay.py" in ok.stdout
    bad = helm_template(LOCUST, set_values=(r"locustfile=locustfiles/qa_grading.py\,shapes/burst.py",))
    assert bad.returncode != 0
    assert "names a load shape: set shape=shapes/<name>.py instead" in bad.stderr


def test_headless_sweep_runs_slabench_sweep_without_workers():
    docs = render(LOCUST, values_files=(LOCUST / "ci" / "headless-sweep-values.yaml",))
    master = container(one(docs, "Job"), "master")
    # The server under test, always: never the embedded simulator a config without target.url would start.
    assert master["args"] == ["slabench", "sweep", "--config", "/config/sweep.yaml", "--sla", "/config/sla.yaml",
                              "--target-url", "http://qa-grader-vllm-serving.slabench.svc:8000",
                              "--output-dir", "/app/runs"]  # fmt: skip
    mounts = {m["mountPath"]: m for m in master["volumeMounts"]}
    assert mounts["/app/runs"]["name"] == "results"  # the sweep's tree is uploaded with the results
    assert "OPENAI_API_KEY" in env_of(master)  # the sweep sends the requests itself
    assert not [d for d in docs if d["metadata"]["name"].endswith("-workers")]


def test_a_sweeps_directory_is_the_root_of_its_results():
    """Results land at <results.s3Uri> (and `slabench deploy` puts them in runs/<run-id>/) for a sweep as for a burst:
    the sweep is named by the run id and its own directory is what gets uploaded, next to the exit code."""
    docs = render(LOCUST, "headless.runId=r-5", values_files=(LOCUST / "ci" / "headless-sweep-values.yaml",))
    master = container(one(docs, "Job"), "master")
    assert master["args"][-2:] == ["--sweep-id", "r-5"]
    assert master["args"][master["args"].index("--output-dir") + 1] == "/app/runs"
    mounts = {m["mountPath"]: m for m in master["volumeMounts"]}
    assert mounts["/app/runs"]["subPath"] == "runs" and mounts["/results"]["name"] == "results"
    assert env_of(master)["RESULTS_DIR"] == "/results/runs/r-5"  # = /app/runs/r-5, the sweep's directory
    burst = container(
        one(render(LOCUST, "mode=headless", SLA, "headless.runId=r-6"), "Job", "t-locust-master"), "master"
    )
    assert burst["args"][-2:] == ["--run-id", "r-6"] and env_of(burst)["RESULTS_DIR"] == "/results"


def test_headless_without_an_sla_fails_with_the_fix():
    proc = helm_template(LOCUST, set_values=("mode=headless",))
    assert proc.returncode != 0
    assert "set config.sla" in proc.stderr


def test_run_job_script_ships_in_the_chart_unchanged():
    docs = render(LOCUST, "mode=headless", SLA)
    script = one(docs, "ConfigMap", "t-locust-scripts")["data"]["run-job.sh"]
    assert script == (LOCUST / "files" / "run-job.sh").read_text()


def test_locust_pods_are_non_root_read_only_and_capability_free():
    docs = render(LOCUST, "mode=headless", SLA)
    for name in ("t-locust-master", "t-locust-workers"):
        job = one(docs, "Job", name)
        spec = pod_spec(job)
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["runAsUser"] == 10001
        assert spec["automountServiceAccountToken"] is False
        for c in spec["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
            assert c["resources"]["requests"] and c["resources"]["limits"]


def test_network_policy_lets_only_workers_reach_the_master_protocol_port():
    docs = render(LOCUST, "master.webAllowedCidrs={10.0.0.0/16}")
    policy = one(docs, "NetworkPolicy", "t-locust-master")
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "master"
    by_port = {r["ports"][0]["port"]: r["from"] for r in policy["spec"]["ingress"]}
    assert set(by_port) == {MASTER_PORT, WEB_PORT}
    assert by_port[MASTER_PORT] == [
        {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "locust", "app.kubernetes.io/instance": "t",
                                         "app.kubernetes.io/component": "worker"}}}
    ]  # fmt: skip
    assert {"ipBlock": {"cidr": "10.0.0.0/16"}} in by_port[WEB_PORT]
    deny = one(docs, "NetworkPolicy", "t-locust-default-deny")
    assert "ingress" not in deny["spec"]


def test_web_ingress_scenario_exposes_the_ui_through_an_internal_alb():
    docs = render(LOCUST, values_files=(LOCUST / "ci" / "web-ingress-values.yaml",))
    ing = one(docs, "Ingress")
    assert ing["metadata"]["annotations"]["alb.ingress.kubernetes.io/scheme"] == "internal"
    assert ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"] == {"name": "web"}
    image = container(one(docs, "Deployment", "t-locust-master"), "master")["image"]
    assert image.startswith("ghcr.io/slabench/suite@sha256:")


def test_default_images_are_the_fleet_and_suite_images():
    serving = one(render(SERVING), "Deployment")
    assert container(serving, "vllm")["image"] == "vllm/vllm-openai:v0.32.0-cu129"
    env = env_of(container(serving, "vllm"))
    # The upstream image runs as our uid without a passwd entry: a user name and writable JIT caches are set.
    assert env["USER"] == "vllm" and env["TRITON_CACHE_DIR"].startswith("/cache/")
    assert container(serving, "hydrate-weights", init=True)["image"] == "ghcr.io/slabench/suite:0.1.0"
    locust = one(render(LOCUST), "Deployment", "t-locust-master")
    assert container(locust, "master")["image"] == "ghcr.io/slabench/suite:0.1.0"


def test_helm3_renders_the_same_objects_as_helm4():
    helm3 = get_helm(3)
    for chart, sets in ((SERVING, ()), (LOCUST, ("mode=headless", SLA))):
        a = helm_template(chart, set_values=sets)
        b = helm_template(chart, set_values=sets, helm=helm3)
        assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
        assert [d for d in yaml.safe_load_all(a.stdout) if d] == [d for d in yaml.safe_load_all(b.stdout) if d]


@pytest.mark.parametrize("chart", [SERVING, LOCUST, ROOT / "karpenter", ROOT / "observability"])
def test_chart_metadata_schema_and_notes(chart):
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    assert meta["apiVersion"] == "v2" and meta["kubeVersion"] == ">=1.30.0-0"
    schema_text = (chart / "values.schema.json").read_text()
    refs = re.findall(r'"\$ref":\s*"([^"]*)"', schema_text)
    assert all(r.startswith("#/") for r in refs), refs  # local refs only: no network at install time
    assert json.loads(schema_text)["additionalProperties"] is False
    assert (chart / "templates" / "NOTES.txt").is_file()
    assert list((chart / "ci").glob("*-values.yaml"))


# --- the platform review's minor findings ---------------------------------------------------------------------------


def test_the_alb_exposes_only_the_openai_api():
    rules = one(render(SERVING), "Ingress")["spec"]["rules"]
    assert [p["path"] for r in rules for p in r["http"]["paths"]] == ["/v1"]  # not /metrics, /health, /version


def test_no_cpu_limits_on_the_server_or_the_load_generators():
    """A CFS quota throttles in bursts and shows up as latency the model did not cause: requests only."""
    serving = container(one(render(SERVING), "Deployment"), "vllm")["resources"]
    docs = render(LOCUST, "mode=headless", SLA)
    generators = [container(one(docs, "Job", "t-locust-master"), "master")["resources"],
                  container(one(docs, "Job", "t-locust-workers"), "worker")["resources"]]  # fmt: skip
    for r in (serving, *generators):
        assert "cpu" in r["requests"] and "cpu" not in r["limits"] and "memory" in r["limits"], r


def test_the_rollout_deadline_covers_a_cold_start():
    dep = one(render(SERVING), "Deployment")
    startup = container(dep, "vllm")["startupProbe"]
    assert dep["spec"]["progressDeadlineSeconds"] >= startup["periodSeconds"] * startup["failureThreshold"]
    proc = helm_template(SERVING, set_values=("rolloutDeadlineSeconds=900",))
    assert (
        proc.returncode != 0
        and "rolloutDeadlineSeconds (900) is shorter than the startup probe's budget" in proc.stderr
    )


def test_a_per_pod_cache_meets_the_restricted_pod_security_standard():
    from slabench.deploy.manifests import Rendered, pod_security_level

    text = helm_template(SERVING, set_values=("weightCache.hostCache=false",)).stdout
    dep = one([d for d in yaml.safe_load_all(text) if d], "Deployment")
    volumes = {v["name"]: v for v in pod_spec(dep)["volumes"]}
    assert "hostPath" not in volumes["model-cache"] and volumes["model-cache"]["emptyDir"]["sizeLimit"] == "64Gi"
    assert [c["name"] for c in pod_spec(dep)["initContainers"]] == ["hydrate-weights"]  # no root chown step
    assert pod_security_level(Rendered("vllm-serving", text))[0] == "restricted"
    default = helm_template(SERVING).stdout
    assert pod_security_level(Rendered("vllm-serving", default)) == (
        "privileged", "Deployment/t-vllm-serving mounts a hostPath volume (weightCache.hostCache)")  # fmt: skip


def test_notes_promise_no_node_role_fallback_for_the_weights():
    notes = (SERVING / "templates" / "NOTES.txt").read_text()
    assert "node role allows" not in notes and "no fallback to the node role" in notes
    fleet = yaml.safe_load((ROOT / "karpenter" / "values.yaml").read_text())
    assert fleet["metadataOptions"]["httpPutResponseHopLimit"] == 1  # why there is none


def test_the_locust_web_ui_behind_an_alb_requires_a_login():
    proc = helm_template(LOCUST, set_values=("master.ingress.enabled=true",))
    assert proc.returncode != 0 and "without a login: set master.ingress.auth" in proc.stderr
    proc = helm_template(LOCUST, set_values=("master.ingress.enabled=true", "master.ingress.auth.type=oidc"))
    assert proc.returncode != 0 and "needs HTTPS: set master.ingress.certificateArn" in proc.stderr
    ann = one(render(LOCUST, values_files=(LOCUST / "ci" / "web-ingress-values.yaml",)), "Ingress")["metadata"][
        "annotations"
    ]
    assert ann["alb.ingress.kubernetes.io/auth-type"] == "oidc"
    assert ann["alb.ingress.kubernetes.io/auth-on-unauthenticated-request"] == "authenticate"
    assert json.loads(ann["alb.ingress.kubernetes.io/auth-idp-oidc"])["secretName"] == "locust-oidc-client"
    assert ann["alb.ingress.kubernetes.io/listen-ports"] == '[{"HTTPS": 443}]'


@pytest.mark.parametrize("family", ["g5", "g6", "g7"])
def test_each_whole_card_family_has_serving_values_that_land_on_its_pool_and_fit_the_workload(family):
    """The 24 GB cards (g5 A10G, g6 L4) and g7's RTX PRO 4500 get their own values file: pinned to a pool that
    launches that family, and a context that holds the workload's longest request (the chart once refused ~1 %)."""
    from slabench.deploy.context import longest_request
    from tests.helpers.platform_helpers import FLEET

    dep = one(render(SERVING, values_files=(SERVING / "ci" / f"{family}-values.yaml",)), "Deployment")
    selector = pod_spec(dep)["nodeSelector"]
    assert selector["karpenter.k8s.aws/instance-family"] == family
    pools = {d["metadata"]["name"]: d for d in render(FLEET) if d["kind"] == "NodePool"}
    requirements = pools[selector["karpenter.sh/nodepool"]]["spec"]["template"]["spec"]["requirements"]
    (families,) = [r["values"] for r in requirements if r["key"] == "karpenter.k8s.aws/instance-family"]
    assert family in families
    args = container(dep, "vllm")["args"]
    assert int(args[args.index("--max-model-len") + 1]) >= longest_request(str(ROOT / "datasets"), "verbose").total
