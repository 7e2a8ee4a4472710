"""`helm test` check: every serving pod carries an ALB target-health readiness gate, and the gate is satisfied.

The AWS Load Balancer Controller injects the gate only into pods created in a namespace labelled
elbv2.k8s.aws/pod-readiness-gate-inject=enabled; without it a rollout can mark pods Ready before the ALB sends them
traffic. Uses the kubernetes client (in the suite image) with the test's own read-only ServiceAccount.
Env: POD_NAMESPACE, POD_SELECTOR. Exit 0 = pass, 1 = fail.
"""

import os
import sys

GATE_PREFIX = "target-health.elbv2.k8s.aws/"


def gate_problems(pods: list[dict]) -> list[str]:
    """Problems with the readiness gates of `pods` (plain dicts in the API's JSON shape)."""
    if not pods:
        return ["no serving pods match the selector"]
    problems = []
    for pod in pods:
        name = pod["metadata"]["name"]
        gates = [g["conditionType"] for g in pod.get("spec", {}).get("readinessGates") or []]
        alb_gates = [g for g in gates if g.startswith(GATE_PREFIX)]
        if not alb_gates:
            problems.append(
                f"pod {name} has no {GATE_PREFIX}* readiness gate: label the namespace "
                "elbv2.k8s.aws/pod-readiness-gate-inject=enabled and restart the pods"
            )
            continue
        conditions = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions") or []}
        for gate in alb_gates:
            if conditions.get(gate) != "True":
                problems.append(f"pod {name}: readiness gate {gate} is {conditions.get(gate, 'not reported')}")
    return problems


def main() -> int:
    from kubernetes import client, config

    config.load_incluster_config()
    api = client.CoreV1Api()
    raw = api.list_namespaced_pod(os.environ["POD_NAMESPACE"], label_selector=os.environ["POD_SELECTOR"])
    pods = [api.api_client.sanitize_for_serialization(p) for p in raw.items]
    problems = gate_problems(pods)
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    if not problems:
        print(f"OK: {len(pods)} pod(s) carry satisfied ALB readiness gates")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
