#!/usr/bin/env bash
# Install the cluster add-ons slabench runs on, in the order that works on a fresh EKS cluster (docs/eks.md, step 3).
#
# The order is forced by custom resources: a chart that creates an object of a kind whose CRD is not installed yet
# aborts ("no matches for kind ServiceMonitor"), and the GPU Operator stops at its DCGM exporter's ServiceMonitor
# (before feature discovery and the MIG manager) when the Prometheus Operator's CRDs are missing. So:
#
#   1. monitoring            kube-prometheus-stack: Prometheus Operator CRDs, Prometheus, Alertmanager, Grafana
#   2. load-balancer         AWS Load Balancer Controller: TargetGroupBinding CRD, the pod readiness-gate webhook
#   3. karpenter             Karpenter: its CRDs, controller, ServiceMonitor (needs 1)
#   4. fleet                 slabench-fleet (karpenter/): NodePools, EC2NodeClasses, NodeOverlay, the MIG gate (needs 3)
#   5. gpu-operator          NVIDIA GPU Operator: ClusterPolicy, MIG manager, DCGM exporter + ServiceMonitor (needs 1)
#   6. keda                  KEDA: ScaledObject CRD, for the serving chart's autoscaling
#   7. slabench-monitoring   observability/: the Grafana dashboard and the alert rules (needs 1)
#
# Every chart is pinned (the versions below; our values are checked against those charts' own values keys by
# tests/unit/test_platform_upstream_values.py). Each step waits (--wait) so the next one finds its CRDs and webhooks.
#
# usage: scripts/eks/install-platform.sh [STEP...]          (default: every step, in order)
# needs: helm 3.17+ or 4 and a kubeconfig for the cluster; environment:
#   CLUSTER              EKS cluster name                          AWS_REGION   its region
#   VPC_ID               the cluster's VPC (the LB controller cannot read it from IMDS with hop limit 1)
#   LBC_ROLE_ARN         IAM role (IRSA) of the AWS Load Balancer Controller (scripts/eks/cluster.yaml creates it;
#                        Karpenter's role comes through EKS Pod Identity and needs nothing here)
#   SUITE_IMAGE          the suite image you pushed (docker/suite/Dockerfile), REGISTRY/REPO:TAG or REPO@sha256:...;
#                        the fleet's MIG gate runs it (as do slabench deploy's Locust and weight-cache pods)
#   KARPENTER_NODE_ROLE  node role (default KarpenterNodeRole-$CLUSTER)
#   HELM                 helm binary (default helm);  HELM_WAIT_FLAGS (default "--wait --timeout 15m")
#   CHART_MIRROR         a directory holding the upstream charts as <name>/ (air-gapped mirrors; the tests)
set -euo pipefail

KUBE_PROMETHEUS_STACK_VERSION=88.5.3
AWS_LOAD_BALANCER_CONTROLLER_VERSION=3.5.0
KARPENTER_VERSION=1.14.1
GPU_OPERATOR_VERSION=v26.7.0
KEDA_VERSION=2.20.2

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
helm="${HELM:-helm}"
read -r -a wait_flags <<<"${HELM_WAIT_FLAGS:---wait --timeout 15m}"

need() {
  for var in "$@"; do
    if [[ -z "${!var:-}" ]]; then
      echo "install-platform: set $var (see the header of $0 and docs/eks.md)" >&2
      exit 3
    fi
  done
}

# upstream NAME REPO VERSION: the chart reference and version flags (a local copy under CHART_MIRROR wins).
chart_args=()
upstream() {
  if [[ -n "${CHART_MIRROR:-}" ]]; then
    chart_args=("$CHART_MIRROR/$1")
  elif [[ "$2" == oci://* ]]; then
    chart_args=("$2" --version "$3")
  else
    chart_args=("$1" --repo "$2" --version "$3")
  fi
}

# image_args KEY: --set flags pointing the chart value KEY (repository/tag/digest) at $SUITE_IMAGE.
image_args=()
image_args() {
  local ref="$SUITE_IMAGE" repo tag=""
  if [[ "$ref" == *@sha256:* ]]; then
    image_args=(--set "$1.repository=${ref%@*}" --set "$1.digest=${ref#*@}")
    return
  fi
  repo="${ref%:*}"
  # a colon before the last slash is a registry port, not a tag
  if [[ "$repo" != "$ref" && "${ref##*/}" == *:* ]]; then tag="${ref##*:}"; else repo="$ref"; fi
  if [[ -z "$tag" ]]; then
    echo "install-platform: SUITE_IMAGE=$ref names no tag or digest (REGISTRY/REPO:TAG or REPO@sha256:...)" >&2
    exit 3
  fi
  image_args=(--set "$1.repository=$repo" --set "$1.tag=$tag" --set "$1.digest=")
}

install() {  # install RELEASE NAMESPACE CHART-ARGS... -- HELM-ARGS...
  local release="$1" namespace="$2"
  shift 2
  echo "== $release ($namespace)"
  "$helm" upgrade --install "$release" "$@" --namespace "$namespace" --create-namespace "${wait_flags[@]}"
}

step_monitoring() {
  upstream kube-prometheus-stack https://prometheus-community.github.io/helm-charts "$KUBE_PROMETHEUS_STACK_VERSION"
  install kube-prometheus-stack monitoring "${chart_args[@]}" -f "$root/observability/kube-prometheus-stack-values.yaml"
}

step_load_balancer() {
  upstream aws-load-balancer-controller https://aws.github.io/eks-charts "$AWS_LOAD_BALANCER_CONTROLLER_VERSION"
  install aws-load-balancer-controller kube-system "${chart_args[@]}" \
    -f "$root/scripts/eks/values/aws-load-balancer-controller.yaml" \
    --set clusterName="$CLUSTER" --set region="$AWS_REGION" --set vpcId="$VPC_ID" \
    --set serviceAccount.annotations."eks\.amazonaws\.com/role-arn"="$LBC_ROLE_ARN"
}

step_karpenter() {
  upstream karpenter oci://public.ecr.aws/karpenter/karpenter "$KARPENTER_VERSION"
  install karpenter kube-system "${chart_args[@]}" -f "$root/scripts/eks/values/karpenter.yaml" \
    --set settings.clusterName="$CLUSTER" --set settings.interruptionQueue="$CLUSTER"
}

step_fleet() {
  image_args migGate.image
  install slabench-fleet kube-system "$root/karpenter" "${image_args[@]}" \
    --set clusterName="$CLUSTER" --set nodeRole="${KARPENTER_NODE_ROLE:-KarpenterNodeRole-$CLUSTER}"
}

step_gpu_operator() {
  upstream gpu-operator https://helm.ngc.nvidia.com/nvidia "$GPU_OPERATOR_VERSION"
  install gpu-operator gpu-operator "${chart_args[@]}" -f "$root/gpu-operator/values.yaml"
}

step_keda() {
  upstream keda https://kedacore.github.io/charts "$KEDA_VERSION"
  install keda keda "${chart_args[@]}" -f "$root/scripts/eks/values/keda.yaml"
}

step_slabench_monitoring() {
  install slabench-monitoring monitoring "$root/observability"
}

steps=(monitoring load-balancer karpenter fleet gpu-operator keda slabench-monitoring)
selected=("$@")
[[ ${#selected[@]} -eq 0 ]] && selected=("${steps[@]}")
for s in "${selected[@]}"; do
  if [[ " ${steps[*]} " != *" $s "* ]]; then
    echo "install-platform: unknown step '$s' (steps, in order: ${steps[*]})" >&2
    exit 3
  fi
done
# Every setting the selected steps need, checked before the first install: a missing one stops nothing half-way.
for s in "${selected[@]}"; do
  case "$s" in
    load-balancer) need CLUSTER AWS_REGION VPC_ID LBC_ROLE_ARN ;;
    karpenter) need CLUSTER ;;
    fleet) need CLUSTER SUITE_IMAGE && image_args migGate.image ;;
  esac
done
for s in "${selected[@]}"; do
  "step_${s//-/_}"
done
echo "install-platform: done (${selected[*]})"
