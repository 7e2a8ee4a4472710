"""The deploy sequence: render → namespace → serving release → ready → Locust Job → verdict → results → uninstall.

Helm, the Kubernetes API and S3 come in as objects so the order of calls can be checked against a fake API server.
Progress goes to `log` (stderr); only a dry run writes to `out` (the rendered manifests, exactly `helm template`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO, TypedDict

from slabench.core.errors import UserError
from slabench.deploy.errors import DeployFailed
from slabench.deploy.helm import Helm
from slabench.deploy.kube import READINESS_GATE_LABEL, READINESS_GATE_PREFIX, Kube, exit_code_of
from slabench.deploy.manifests import (
    PSS_LABEL,
    PSS_LEVELS,
    Manifest,
    Rendered,
    alb_target,
    pod_security_level,
    target_host,
)
from slabench.deploy.plan import DeployPlan, Values, locust_values, serving_values
from slabench.weights.s3 import S3Url

Fetch = Callable[[S3Url, Path], list[Path]]
LOG_TAIL_LINES = 40


# Rendered only by a dry run of `--target alb` whose Ingress names no host: the ALB's DNS name does not exist yet.
ALB_PENDING = "http://alb-dns-name.pending.invalid"


@dataclass(frozen=True)
class Charts:
    """Values and `helm template` output of both charts for one plan."""

    serving_values: Values
    serving: Rendered
    locust_values: Values
    locust: Rendered
    target: str  # the URL the load goes to

    @property
    def text(self) -> str:
        return self.serving.text + self.locust.text

    @property
    def gated(self) -> bool:
        """Does the serving chart put an ALB in front (so pods must get the ALB's readiness gates)?"""
        return any(d.get("kind") == "Ingress" for d in self.serving.docs)


def render_serving(plan: DeployPlan, helm: Helm, replicas: int | None = None) -> tuple[Values, Rendered]:
    sv = serving_values(plan)
    if replicas is not None:
        sv = {**sv, "replicaCount": replicas}
    text = helm.template(plan.serving_release, plan.serving_chart, sv, plan.namespace)
    return sv, Rendered(plan.serving_chart.name, text)


def render(plan: DeployPlan, helm: Helm, alb_hostname: str | None = None) -> Charts:
    """Both charts as `helm template` renders them with this plan's values. The Locust target is the serving chart's
    own Service, or with `--target alb` its Ingress (the load balancer's DNS name once known)."""
    sv, serving = render_serving(plan, helm)
    service = target_host(serving, plan.namespace)
    if plan.target == "alb":
        alb = alb_target(serving)
        target = alb.url or (f"http://{alb_hostname}" if alb_hostname else ALB_PENDING)
    else:
        target = service
    labels = serving.one("Deployment", "server")["spec"]["selector"]["matchLabels"]
    lv = locust_values(plan, target, ",".join(f"{k}={v}" for k, v in labels.items()), service)
    locust = Rendered(plan.locust_chart.name, helm.template(plan.locust_release, plan.locust_chart, lv, plan.namespace))
    return Charts(sv, serving, lv, locust, target)


def _wait(what: str, check: Callable[[], tuple[bool, str]], timeout_s: float, poll_s: float, log: TextIO) -> str:
    """Poll `check` until it reports done; print each change of state; DeployFailed on timeout."""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        done, summary = check()
        if summary != last:
            print(f"deploy: {what}: {summary}", file=log, flush=True)
            last = summary
        if done:
            return summary
        if time.monotonic() >= deadline:
            raise DeployFailed(f"{what}: still '{summary}' after {timeout_s:.0f} s — see kubectl describe/logs")
        time.sleep(poll_s)


def run(plan: DeployPlan, helm: Helm, kube: Kube, fetch: Fetch | None, log: TextIO) -> int:
    """Deploy, run, grade, clean up. Returns the Locust Job's exit code (the verdict)."""
    charts = render(plan, helm)
    deployment = charts.serving.one("Deployment", "server")
    dep_name, selector = deployment["metadata"]["name"], deployment["spec"]["selector"]["matchLabels"]
    service = charts.serving.name("Service", "server")
    job = charts.locust.name("Job", "master")

    # Pod Security: a new namespace enforces the strictest standard the serving pods meet; an existing one that
    # enforces a stricter standard would reject them after a GPU node came up, so that stops here.
    level, why = pod_security_level(charts.serving)
    have = kube.namespace_labels(plan.namespace)
    enforced = (have or {}).get(PSS_LABEL, "privileged")
    if have is not None and enforced in PSS_LEVELS and PSS_LEVELS.index(enforced) > PSS_LEVELS.index(level):
        raise UserError(
            f"--namespace {plan.namespace}: it enforces the Pod Security Standard '{enforced}' but {why} — set "
            "weightCache.hostCache=false in --serving-values (a per-pod cache) or use a namespace that allows it"
        )
    created = {PSS_LABEL: level} if have is None else {}
    done = kube.ensure_namespace(plan.namespace, {READINESS_GATE_LABEL: "enabled"}, created)
    print(
        f"deploy: namespace {plan.namespace}: {done} (ALB pod readiness gates on; pods meet Pod Security '{level}')",
        file=log,
    )
    if plan.api_key_secret and not kube.secret_exists(plan.namespace, plan.api_key_secret):
        raise UserError(
            f"--api-key-secret: no Secret {plan.api_key_secret!r} in namespace {plan.namespace} — create it: "
            f"kubectl -n {plan.namespace} create secret generic {plan.api_key_secret} --from-literal=api-key=..."
        )

    installed: list[str] = []
    try:
        installed.append(plan.serving_release)
        if charts.gated:
            # The AWS Load Balancer Controller injects a pod's ALB readiness gate only when the pod is created after a
            # TargetGroupBinding for its Service exists. Helm creates Deployments before Ingresses, so the first
            # install runs no pods: Service and Ingress first, the replicas once the binding is there.
            print(
                f"deploy: installing {plan.serving_release} with 0 replicas until the ALB targets its Service", file=log
            )
            sv0, _ = render_serving(plan, helm, replicas=0)
            helm.upgrade_install(plan.serving_release, plan.serving_chart, sv0, plan.namespace)

            def bound() -> tuple[bool, str]:
                return kube.target_group_binding(plan.namespace, service)

            _wait(f"targetgroupbinding for service/{service}", bound, plan.alb_timeout_s, plan.poll_interval_s, log)
        print(f"deploy: installing {plan.serving_release} ({plan.serving_chart})", file=log)
        helm.upgrade_install(plan.serving_release, plan.serving_chart, charts.serving_values, plan.namespace)

        def ready() -> tuple[bool, str]:
            r = kube.rollout(plan.namespace, dep_name)
            return r.ready, r.summary

        _wait(f"deployment/{dep_name}", ready, plan.ready_timeout_s, plan.poll_interval_s, log)
        serving_pods = kube.pods(plan.namespace, selector)
        if charts.gated:
            _check_readiness_gates(serving_pods, log)
        if charts.target == ALB_PENDING:
            ingress = alb_target(charts.serving).ingress

            def addressed() -> tuple[bool, str]:
                host = kube.ingress_hostname(plan.namespace, ingress)
                return host is not None, host or "no address yet"

            hostname = _wait(f"ingress/{ingress}", addressed, plan.alb_timeout_s, plan.poll_interval_s, log)
            charts = render(plan, helm, alb_hostname=hostname)
        print(f"deploy: the load goes to {charts.target} ({plan.target})", file=log)

        # A Job's pod template is immutable: a run is always a fresh release, never an upgrade of the last one.
        helm.uninstall(plan.locust_release, plan.namespace)
        print(f"deploy: starting the {plan.kind} run {plan.run_id} ({plan.locust_release})", file=log)
        installed.append(plan.locust_release)
        helm.upgrade_install(plan.locust_release, plan.locust_chart, charts.locust_values, plan.namespace)

        def finished() -> tuple[bool, str]:
            s = kube.job_state(plan.namespace, job)
            return s.done, s.reason

        _wait(f"job/{job}", finished, plan.run_timeout_s, plan.poll_interval_s, log)
        code = _verdict(plan, kube, job, log)
        dest = plan.results_dir / plan.run_id
        if plan.run_results and fetch is not None:
            files = fetch(plan.run_results, dest)
            print(f"deploy: fetched {len(files)} result files from {plan.run_results}/ into {dest}", file=log)
            _print_verdict(dest, log)
        _write_images(dest, serving_pods + kube.job_pods(plan.namespace, job), log)
        print(f"deploy: verdict exit code {code}", file=log)
        return code
    finally:
        if plan.keep:
            print(f"deploy: --keep: releases {', '.join(installed)} left installed", file=log)
        else:
            for release in reversed(installed):
                helm.uninstall(release, plan.namespace)
                print(f"deploy: uninstalled {release}", file=log)


def _check_readiness_gates(pods: list[Manifest], log: TextIO) -> None:
    """Every serving pod behind the ALB carries the controller's target-health gate, or the run stops: without it a
    pod counts as Ready before the ALB sends it traffic, and health gating silently does not apply."""
    ungated = [
        p["metadata"]["name"]
        for p in pods
        if not any(
            g.get("conditionType", "").startswith(READINESS_GATE_PREFIX) for g in p["spec"].get("readinessGates") or []
        )
    ]
    if ungated or not pods:
        raise DeployFailed(
            f"ALB readiness gates missing on {', '.join(ungated) or 'every pod (none found)'}: check the namespace "
            f"label {READINESS_GATE_LABEL}=enabled and that the AWS Load Balancer Controller's pod webhook runs"
        )
    print(f"deploy: ALB readiness gates on {len(pods)}/{len(pods)} serving pods", file=log)


class Image(TypedDict):
    """One container's image in runs/<run-id>/images.json."""

    pod: str
    container: str
    image: str | None  # as the pod spec asks for it
    image_id: str | None  # the digest the node pulled (status imageID); None before it ran
    pinned: bool  # the spec names a digest (image@sha256:...)


def images_of(pods: list[Manifest]) -> list[Image]:
    """What each container ran: the image as asked for and the digest the node pulled (status imageID)."""
    out: list[Image] = []
    for pod in pods:
        statuses = {c.get("name"): c for c in ((pod.get("status") or {}).get("containerStatuses") or [])}
        statuses.update({c.get("name"): c for c in ((pod.get("status") or {}).get("initContainerStatuses") or [])})
        spec = pod.get("spec") or {}
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            image_id = (statuses.get(c["name"]) or {}).get("imageID") or None
            out.append({"pod": pod["metadata"]["name"], "container": c["name"], "image": c.get("image"),
                        "image_id": image_id, "pinned": "@sha256:" in str(c.get("image"))})  # fmt: skip
    return out


def _write_images(dest: Path, pods: list[Manifest], log: TextIO) -> None:
    """runs/<run-id>/images.json: the provenance of the images that served and loaded the run, by digest."""
    import json

    images = images_of(pods)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "images.json").write_text(json.dumps({"images": images}, indent=2) + "\n", encoding="utf-8")
    unpinned = sorted({image for i in images if (image := i["image"]) and not i["pinned"] and not i["image_id"]})
    note = f"; no digest known for {', '.join(unpinned)} — pin it (image@sha256:...)" if unpinned else ""
    print(f"deploy: images of {len(pods)} pods → {dest / 'images.json'}{note}", file=log)


def _print_verdict(dest: Path, log: TextIO) -> None:
    """The graded verdict's one-line summary, from the run's verdict.json (a sweep's lies in its own directory)."""
    import json

    found = sorted(dest.rglob("verdict.json"), key=lambda p: (len(p.parts), str(p)))
    if not found:
        print(f"deploy: no verdict.json among the results in {dest}", file=log)
        return
    try:
        verdict = json.loads(found[0].read_text(encoding="utf-8"))
        summary, notes = verdict["summary"], verdict.get("notes") or []
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        print(f"deploy: {found[0]}: unreadable verdict ({type(e).__name__})", file=log)
        return
    print(f"deploy: verdict: {summary} ({found[0]})", file=log)
    # what the run found differs from what the contract says (hardware, replicas): said next to the verdict
    for note in notes:
        if isinstance(note, str) and note.startswith("WARNING"):
            print(f"deploy: {note}", file=log)


def _verdict(plan: DeployPlan, kube: Kube, job: str, log: TextIO) -> int:
    pods = kube.job_pods(plan.namespace, job)
    codes = [(p["metadata"]["name"], c) for p in pods if (c := exit_code_of(p, "master")) is not None]
    if not codes:
        state = kube.job_state(plan.namespace, job)
        raise DeployFailed(f"job/{job} ended ({state.reason}) without a finished master container — no verdict")
    pod, code = codes[-1]
    tail = kube.log_tail(plan.namespace, pod, "master", LOG_TAIL_LINES)
    print(f"deploy: last lines of {pod}:", file=log)
    for line in tail.rstrip("\n").splitlines():
        print(f"  {line}", file=log)
    return code
