"""`slabench fleet check`: does the one serving image run on every GPU node of the fleet, and if not, why not.

Exit codes: 0 every node passes (warnings allowed unless --strict), 1 at least one node fails, 3 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys

from slabench.core.errors import UserError
from slabench.core.textcols import add_documented_command
from slabench.fleet import miggate
from slabench.fleet.facts import load_facts
from slabench.fleet.image import FLEET_IMAGE, FLEET_IMAGE_ARCH_LIST, FLEET_IMAGE_CUDA, ImageSpec, image_problems
from slabench.fleet.nodes import ImageBlock, load_nodes
from slabench.fleet.report import render_table, to_json
from slabench.fleet.rules import FleetResult, Severity, check_fleet
from slabench.fleet.versions import CudaVersion, parse_arch_list

EXIT_OK, EXIT_INCOMPATIBLE = 0, 1


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fleet = subparsers.add_parser("fleet", help="GPU fleet tools", description="GPU fleet tools.")
    sub = fleet.add_subparsers(dest="fleet_command", required=True)
    check = add_documented_command(sub, "check", "check that the serving image runs on every GPU node", __doc__)
    source = check.add_mutually_exclusive_group(required=True)
    source.add_argument("--nodes", metavar="FILE", help="fleet file (see examples/fleet/nodes.yaml)")
    source.add_argument("--from-cluster", action="store_true", help="read the nodes from Kubernetes (node labels)")
    check.add_argument("--kubeconfig", help="kubeconfig for --from-cluster (default: $KUBECONFIG, ~/.kube/config)")
    check.add_argument("--context", help="kubeconfig context for --from-cluster")
    check.add_argument("--selector", help="label selector for --from-cluster, e.g. karpenter.sh/nodepool=gpu")
    check.add_argument("--image", help=f"image name shown in the report (default: {FLEET_IMAGE})")
    check.add_argument("--image-cuda", metavar="X.Y", help=f"CUDA release of the image (default: {FLEET_IMAGE_CUDA})")
    check.add_argument(
        "--image-arch-list",
        metavar="LIST",
        help=f"TORCH_CUDA_ARCH_LIST of the image (default: '{FLEET_IMAGE_ARCH_LIST}')",
    )
    check.add_argument("--facts", metavar="FILE", help="facts table to use instead of the packaged gpu_facts.yaml")
    check.add_argument("--strict", action="store_true", help="treat warnings as failures")
    check.add_argument("--format", choices=("table", "json"), default="table")
    check.set_defaults(func=run_check)

    gate = add_documented_command(
        sub,
        "mig-gate",
        "remove a MIG pool node's startup taint once mig-manager has sliced its card (runs in the cluster)",
        miggate.__doc__,
    )
    gate.add_argument("--pool", required=True, help="Karpenter NodePool whose nodes are gated, e.g. gpu-g7e-mig")
    gate.add_argument("--taint", default="slabench.io/mig-pending", help="the pool's startup taint key")
    gate.add_argument("--profile", required=True, help="MIG profile of every slice, e.g. 2g.48gb")
    gate.add_argument("--slices", type=int, required=True, help="nvidia.com/gpu a sliced node offers")
    gate.add_argument("--failed-after", type=_duration, default=1200.0, help="give up on slicing after (default 20m)")
    gate.add_argument("--max-replacements", type=int, default=2, help="failed nodes replaced per hour (default 2)")
    gate.add_argument("--interval", type=_duration, default=15.0, help="between passes (default 15s)")
    gate.add_argument("--once", action="store_true", help="one pass, print what was decided, exit")
    gate.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster, else $KUBECONFIG)")
    gate.add_argument("--context", help="kubeconfig context")
    gate.set_defaults(func=run_mig_gate)


def _duration(text: str) -> float:
    from slabench.deploy.cli import parse_duration

    return parse_duration(text)


def run_mig_gate(args: argparse.Namespace) -> int:
    from slabench.fleet.cluster import _api_client

    if args.slices < 1 or args.max_replacements < 0:
        raise UserError("--slices must be at least 1 and --max-replacements at least 0")
    spec = miggate.GateSpec(args.pool, args.taint, args.profile, args.slices, args.failed_after, args.max_replacements)
    gate = miggate.MigGate(_api_client(args.kubeconfig, args.context), spec)
    if args.once:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            decided = gate.run_once()
        except (ApiException, HTTPError) as e:
            raise UserError(f"Kubernetes API: {getattr(e, 'status', '')} {getattr(e, 'reason', e)}") from None
        for name, d in decided:
            print(f"{name}: {d.action}: {d.reason}")
        return 0
    gate.run(args.interval, log=lambda line: print(line, flush=True))
    return 0


def resolve_image(args: argparse.Namespace, block: ImageBlock | None) -> ImageSpec:
    """Flags override the fleet file's `image:` block, which overrides the fleet image's own facts."""
    name = args.image or (block.name if block else FLEET_IMAGE)
    cuda = args.image_cuda or (block.cuda if block else FLEET_IMAGE_CUDA)
    arch_list = args.image_arch_list or (block.arch_list if block else FLEET_IMAGE_ARCH_LIST)
    try:
        cuda_version = CudaVersion.parse(cuda)
    except ValueError as e:
        raise UserError(f"--image-cuda: {e}") from None
    try:
        archs = parse_arch_list(arch_list)
    except ValueError as e:
        raise UserError(f"--image-arch-list: {e}") from None
    return ImageSpec(name, cuda_version, archs)


def exit_code(result: FleetResult, strict: bool) -> int:
    worst = result.severity
    return EXIT_INCOMPATIBLE if worst == Severity.FAIL or (strict and worst == Severity.WARN) else EXIT_OK


def run_check(args: argparse.Namespace) -> int:
    facts = load_facts(args.facts)
    if args.nodes:
        block, nodes = load_nodes(args.nodes, facts)
        skipped: tuple[str, ...] = ()
    else:
        from slabench.fleet.cluster import read_cluster_nodes

        block = None
        nodes, skipped = read_cluster_nodes(facts, args.kubeconfig, args.context, args.selector)
        if not nodes:
            raise UserError(f"--from-cluster: no GPU nodes found ({len(skipped)} nodes skipped) — check --selector")
    image = resolve_image(args, block)
    problems = image_problems(image, facts)
    if problems:
        raise UserError(f"image {image.name}: arch list vs CUDA {image.cuda}: " + "; ".join(problems))
    result = check_fleet(image, nodes, facts, skipped)
    if args.format == "json":
        json.dump(to_json(result), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_table(result))
    return exit_code(result, args.strict)
