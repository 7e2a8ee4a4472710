"""`slabench deploy`: vLLM + a headless Locust run on EKS, graded, with results fetched and the releases removed.

Exit code: the Locust Job's own (burst: 0 PASS, non-zero FAIL; sweep: 0 PASS, 1 CONDITIONAL, 2 FAIL, 3 invalid input;
4 = passed but the results upload failed), 3 for bad flags, 5 when the platform failed before a verdict (helm error,
timeout). `--dry-run` prints the rendered manifests of both charts, exactly as `helm template` renders them.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from slabench.core.errors import UserError
from slabench.core.extras import require
from slabench.core.textcols import add_documented_command
from slabench.deploy.plan import (
    DeployPlan,
    Values,
    check_plan,
    default_run_id,
    parse_results_url,
    parse_weights_url,
)
from slabench.weights.s3 import S3Url

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(s|m|h)?$")


def parse_duration(text: str) -> float:
    """'90', '90s', '45m', '4h' → seconds."""
    m = _DURATION.match(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 90s, 45m or 4h")
    return float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


def default_charts_dir() -> Path:
    """The repo's helm/ next to this package when run from a checkout, else ./helm."""
    repo = Path(__file__).resolve().parents[2] / "helm"
    return repo if repo.is_dir() else Path("helm")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_documented_command(
        subparsers,
        "deploy",
        "deploy vLLM + Locust on EKS, run the graded load test as a Job, fetch results, uninstall",
        __doc__,
    )
    p.add_argument("--dry-run", action="store_true", help="print the rendered manifests of both charts and stop")
    where = p.add_argument_group("where")
    where.add_argument("--namespace", default="slabench", help="namespace of both releases (default slabench)")
    where.add_argument(
        "--region", default="us-east-1", help="AWS region of the cluster and buckets (default us-east-1)"
    )
    where.add_argument("--serving-release", default="vllm-serving", help="Helm release of the vLLM chart")
    where.add_argument("--locust-release", default="locust", help="Helm release of the Locust chart")
    where.add_argument("--charts-dir", type=Path, default=None, help="directory holding vllm-serving/ and locust/")
    where.add_argument(
        "--kubeconfig", type=Path, default=None, help="kubeconfig (default: KUBECONFIG or ~/.kube/config)"
    )
    where.add_argument("--context", default=None, help="kubeconfig context")
    where.add_argument(
        "--helm", default=os.environ.get("HELM_BIN", "helm"), help="helm binary (default $HELM_BIN or helm)"
    )
    where.add_argument(
        "--suite-image",
        default=os.environ.get("SUITE_IMAGE") or None,
        help="the suite image you pushed (REPO:TAG or REPO@sha256:...), run by the Locust and weight-cache pods "
        "(default $SUITE_IMAGE; required unless --dry-run)",
    )
    model = p.add_argument_group("model")
    model.add_argument("--model", help="MODEL as published to the weight cache (e.g. org/name)")
    model.add_argument("--revision", help="REVISION as published (a commit sha)")
    model.add_argument("--served-model-name", dest="served_name", help="name clients use (--served-model-name)")
    model.add_argument("--weights-s3", help="s3://BUCKET/PREFIX holding MODEL/REVISION/")
    model.add_argument("--serving-role-arn", help="IAM role (IRSA) allowed to read the weights")
    model.add_argument(
        "--serving-image",
        default=os.environ.get("SERVING_IMAGE") or None,
        help="the vLLM image, REPO@sha256:... to pin it (default $SERVING_IMAGE, else the chart's)",
    )
    model.add_argument("--serving-values", action="append", type=Path, default=[], help="values file (repeatable)")
    run = p.add_argument_group("run")
    run.add_argument(
        "--kind",
        choices=["burst", "users", "sweep"],
        default="burst",
        help="burst: the seed's 20,000-request queue replayed open loop by the workers (default); users: closed-loop "
        "users (--users/--spawn-rate/--run-time); sweep: slabench sweep (--sweep)",
    )
    run.add_argument(
        "--target",
        choices=["service", "alb"],
        default="service",
        help="send the load to the vLLM Service in the cluster (default), or through the ALB as users reach it",
    )
    run.add_argument("--sla", type=Path, help="SLA contract (sla.yaml) the run is graded against")
    run.add_argument("--sweep", type=Path, help="sweep config (sweep.yaml), for --kind sweep")
    run.add_argument("--users", type=int, help="--kind users: Locust users (-u)")
    run.add_argument("--spawn-rate", type=float, help="--kind users: Locust spawn rate (-r)")
    run.add_argument("--run-time", help="--kind users: Locust run time (-t), e.g. 195s")
    run.add_argument(
        "--burst-time-scale",
        type=float,
        help="--kind burst: replay every n-th item n times faster (same request rate, 1/n of the time; a smoke run)",
    )
    run.add_argument("--workers", type=int, help="Locust worker pods")
    run.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        help="the model's folder (tokenizer.json, chat template): the context check counts in its tokens",
    )
    run.add_argument("--api-key-secret", help="Secret (key api-key) holding the endpoint's API key")
    run.add_argument("--locust-role-arn", help="IAM role (IRSA) allowed to write the results")
    run.add_argument("--locust-values", action="append", type=Path, default=[], help="values file (repeatable)")
    run.add_argument("--run-id", default=None, help="run id (default: UTC time, YYYYmmdd-HHMMSS)")
    res = p.add_argument_group("results")
    res.add_argument("--results-s3", help="s3://BUCKET/PREFIX; this run's files go under PREFIX/<run-id>/")
    res.add_argument("--results-dir", type=Path, default=Path("runs"), help="local copy: DIR/<run-id>/ (default runs)")
    res.add_argument("--s3-endpoint-url", default=None, help="S3 endpoint for fetching (default: AWS_ENDPOINT_URL)")
    life = p.add_argument_group("lifecycle")
    life.add_argument("--keep", action="store_true", help="leave both releases installed afterwards")
    life.add_argument("--ready-timeout", type=parse_duration, default=2700.0, help="vLLM readiness (default 45m)")
    life.add_argument(
        "--alb-timeout", type=parse_duration, default=600.0, help="ALB target group binding and address (default 10m)"
    )
    life.add_argument("--run-timeout", type=parse_duration, default=14400.0, help="the Locust Job (default 4h)")
    life.add_argument("--poll-interval", type=parse_duration, default=10.0, help="status polling (default 10s)")
    p.set_defaults(func=run_deploy)


def plan_from_args(args: argparse.Namespace) -> DeployPlan:
    if args.users is not None and args.users < 1:
        raise UserError("--users: must be at least 1")
    if args.workers is not None and args.workers < 1:
        raise UserError("--workers: must be at least 1")
    plan = DeployPlan(
        namespace=args.namespace,
        region=args.region,
        serving_release=args.serving_release,
        locust_release=args.locust_release,
        charts_dir=args.charts_dir or default_charts_dir(),
        run_id=args.run_id or default_run_id(),
        kind=args.kind,
        target=args.target,
        serving_values_files=tuple(args.serving_values),
        locust_values_files=tuple(args.locust_values),
        model=args.model,
        revision=args.revision,
        served_name=args.served_name,
        weights=parse_weights_url(args.weights_s3),
        results=parse_results_url(args.results_s3),
        sla=args.sla,
        sweep=args.sweep,
        users=args.users,
        spawn_rate=args.spawn_rate,
        run_time=args.run_time,
        workers=args.workers,
        burst_time_scale=args.burst_time_scale,
        suite_image=args.suite_image,
        serving_image=args.serving_image,
        api_key_secret=args.api_key_secret,
        serving_role_arn=args.serving_role_arn,
        locust_role_arn=args.locust_role_arn,
        keep=args.keep,
        ready_timeout_s=args.ready_timeout,
        alb_timeout_s=args.alb_timeout,
        run_timeout_s=args.run_timeout,
        poll_interval_s=args.poll_interval,
        results_dir=args.results_dir,
    )
    return check_plan(plan, dry_run=args.dry_run)


def check_context(plan: DeployPlan, tokenizer: Path | None) -> None:
    """Every request of the run fits the release's maxModelLen (chart defaults, values files, flags merged)."""
    from slabench.core import yamlio
    from slabench.deploy.context import check_plan_context
    from slabench.deploy.plan import locust_values, merge_values, serving_values

    def chart_defaults(chart: Path) -> Values:
        data = yamlio.load_data(chart / "values.yaml")
        return data if isinstance(data, dict) else {}

    serving = merge_values(chart_defaults(plan.serving_chart), serving_values(plan))
    locust = merge_values(chart_defaults(plan.locust_chart), locust_values(plan, "http://target.invalid"))
    check_plan_context(plan, serving, locust, tokenizer, sys.stderr)


def run_deploy(args: argparse.Namespace) -> int:
    from slabench.deploy import flow
    from slabench.deploy.helm import Helm

    plan = plan_from_args(args)
    require("pyhelm3", "running helm")  # a missing extra is said before the context check's minute of work
    check_context(plan, args.tokenizer)
    helm = Helm(args.helm, kubeconfig=args.kubeconfig, kubecontext=args.context)
    if args.dry_run:
        sys.stdout.write(flow.render(plan, helm).text)
        return 0

    from slabench.deploy.kube import Kube
    from slabench.deploy.results import fetch_results

    kube = Kube(args.kubeconfig, args.context)

    def fetch(url: S3Url, dest: Path) -> list[Path]:
        return fetch_results(url, dest, endpoint_url=args.s3_endpoint_url, region=plan.region)

    return flow.run(plan, helm, kube, fetch, log=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run `slabench deploy` on its own (before the command is wired into `slabench`)."""
    parser = argparse.ArgumentParser(prog="slabench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["deploy", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"slabench: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
