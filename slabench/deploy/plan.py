"""What one `slabench deploy` does, decided up front: a frozen plan built from the command line, and the Helm values
it implies. Pure functions only (no cluster, no helm), so the mapping from flags to chart values is testable alone.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from slabench.core import yamlio
from slabench.core.errors import UserError
from slabench.core.files import read_text
from slabench.core.run_id import check_run_id
from slabench.weights.s3 import S3Url, parse_s3_url

SERVING_CHART = "vllm-serving"
LOCUST_CHART = "locust"
# --kind burst: the seed's open-loop queue (the dataset's 20,000 requests at their offsets), replayed by this shape.
BURST_SHAPE = "shapes/burst.py"
# The chart's headless kind for each run kind: one Locust run (open or closed loop), or `slabench sweep`.
CHART_KIND = {"burst": "burst", "users": "burst", "sweep": "sweep"}
# DNS-1123 label: release names and namespaces.
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,51}[a-z0-9])?$")
_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-[0-9]$")
# REGISTRY[:PORT]/REPO:TAG or REGISTRY[:PORT]/REPO@sha256:<64 hex>
_IMAGE = re.compile(
    r"^(?P<repo>[a-z0-9][a-z0-9._:/-]*?)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9._-]{0,127})|@(?P<digest>sha256:[a-f0-9]{64}))$"
)
SUITE_IMAGE_ENV = "SUITE_IMAGE"
# A chart's values: the YAML mapping of a values file, or what the flags set.
Values = dict[str, Any]


@dataclass(frozen=True)
class DeployPlan:
    namespace: str
    region: str
    serving_release: str
    locust_release: str
    charts_dir: Path
    run_id: str
    kind: str  # burst (the open-loop queue) | users (closed loop, -u/-r/-t) | sweep
    target: str = "service"  # service: the vLLM Service in the cluster; alb: through the load balancer
    serving_values_files: tuple[Path, ...] = ()
    locust_values_files: tuple[Path, ...] = ()
    model: str | None = None
    revision: str | None = None
    served_name: str | None = None
    weights: S3Url | None = None
    results: S3Url | None = None  # base; this run's results go under results/<run_id>/
    sla: Path | None = None
    sweep: Path | None = None
    users: int | None = None
    spawn_rate: float | None = None
    run_time: str | None = None
    workers: int | None = None
    replicas: int | None = None  # the contract's deployment.replicas, set on the release
    sweep_processes: int | None = None  # --kind sweep: the config's run.processes (load processes in the Job pod)
    burst_time_scale: float | None = None  # --kind burst: replay this many times faster (every n-th item)
    suite_image: str | None = None  # the suite image you pushed: the Locust pods and the weight-cache init containers
    serving_image: str | None = None  # the vLLM image (REPO@sha256:... pins it); None: the chart's own
    api_key_secret: str | None = None
    serving_role_arn: str | None = None
    locust_role_arn: str | None = None
    keep: bool = False
    ready_timeout_s: float = 2700.0
    alb_timeout_s: float = 600.0
    run_timeout_s: float = 14400.0
    poll_interval_s: float = 10.0
    results_dir: Path = field(default=Path("runs"))

    @property
    def serving_chart(self) -> Path:
        return self.charts_dir / SERVING_CHART

    @property
    def locust_chart(self) -> Path:
        return self.charts_dir / LOCUST_CHART

    @property
    def run_results(self) -> S3Url | None:
        return self.results.child(self.run_id) if self.results else None


def default_run_id(now: float | None = None) -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))


def _check_label(value: str, flag: str) -> str:
    if not _DNS_LABEL.match(value):
        raise UserError(
            f"{flag}: {value!r} is not a valid name — lowercase letters, digits and '-', at most 53 characters"
        )
    return value


def _existing_file(path: Path | None, flag: str) -> Path | None:
    if path is not None and not path.is_file():
        raise UserError(f"{flag}: {path}: no such file")
    return path


def check_plan(plan: DeployPlan, dry_run: bool) -> DeployPlan:
    """Reject plans that cannot work, with the flag to fix. Returns the plan unchanged."""
    _check_label(plan.namespace, "--namespace")
    _check_label(plan.serving_release, "--serving-release")
    _check_label(plan.locust_release, "--locust-release")
    if plan.serving_release == plan.locust_release:
        raise UserError("--locust-release: must differ from --serving-release (two charts, two releases)")
    if not _REGION.match(plan.region):
        raise UserError(f"--region: {plan.region!r} is not an AWS region name such as us-east-1")
    check_run_id(plan.run_id)
    for chart in (plan.serving_chart, plan.locust_chart):
        if not (chart / "Chart.yaml").is_file():
            raise UserError(f"--charts-dir: {chart} is not a chart (no Chart.yaml) — point it at the repo's helm/")
    for f in (*plan.serving_values_files, *plan.locust_values_files):
        _existing_file(f, "--serving-values/--locust-values")
    _existing_file(plan.sla, "--sla")
    _existing_file(plan.sweep, "--sweep")
    # read every input now (text, YAML), before helm or the cluster is asked anything
    load_values_files(plan.serving_values_files)
    load_values_files(plan.locust_values_files)
    for config in (plan.sla, plan.sweep):
        if config is not None:
            read_text(config)
    closed_loop = {"--users": plan.users, "--spawn-rate": plan.spawn_rate, "--run-time": plan.run_time}
    given = [flag for flag, value in closed_loop.items() if value is not None]
    if plan.kind != "users" and given:
        raise UserError(
            f"{given[0]}: --kind {plan.kind} sets its own load (the burst replays the queue open loop, a sweep its "
            "levels) — use --kind users for a closed-loop run of -u/-r/-t"
        )
    if plan.kind != "burst" and plan.burst_time_scale is not None:
        raise UserError("--burst-time-scale: only for --kind burst (the open-loop queue replay)")
    if plan.burst_time_scale is not None and not plan.burst_time_scale > 0:
        raise UserError("--burst-time-scale: must be greater than 0 (e.g. 10: every 10th item, 10× faster)")
    if plan.kind == "sweep" and plan.sweep is None:
        raise UserError("--sweep: a sweep run needs the sweep config file (--kind sweep --sweep sweep.yaml)")
    if plan.sla is None and not _values_mention(plan.locust_values_files, "config"):
        raise UserError("--sla: the run is graded against an SLA contract — pass --sla sla.yaml")
    if plan.serving_image is not None:
        parse_image(plan.serving_image, "--serving-image")
    if plan.suite_image is not None:
        parse_image(plan.suite_image)
    elif not dry_run:
        raise UserError(
            f"--suite-image: set {SUITE_IMAGE_ENV} (or --suite-image) to the suite image you pushed, e.g. "
            "<account>.dkr.ecr.<region>.amazonaws.com/slabench/suite:0.1.0 — the Locust and weight-cache pods run it"
        )
    if not dry_run and plan.results is None:
        raise UserError("--results-s3: give s3://BUCKET/PREFIX/ so the Job's records and report can be fetched")
    replicas, processes = check_run_configs(plan)
    return replace(plan, replicas=replicas, sweep_processes=processes)


def parse_image(ref: str, flag: str = "--suite-image") -> dict[str, str]:
    """'REPO:TAG' or 'REPO@sha256:...' → the charts' image values (repository, and tag or digest)."""
    m = _IMAGE.match(ref)
    if not m:
        raise UserError(f"{flag}: {ref!r} is not REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:<64 hex>")
    if m["digest"]:
        return {"repository": m["repo"], "digest": m["digest"]}
    return {"repository": m["repo"], "tag": m["tag"], "digest": ""}


def _one_line(e: UserError) -> UserError:
    first, *rest = str(e).splitlines() or [""]
    return UserError(first + (f" (and {len(rest)} more problems)" if rest else ""))


def check_run_configs(plan: DeployPlan) -> tuple[int | None, int | None]:
    """Load the SLA contract and the sweep config with the suite's own loaders — what the Job would do first, after a
    GPU node came up — and check that the sweep tests the contract's load and the serving values run the contract's
    replicas. One line naming file and field, exit 3. Returns the contract's deployment.replicas and the sweep's
    load processes."""
    import tempfile

    from slabench.sla.contract import load_contract
    from slabench.sweep.config import load_sweep

    embedded = load_values_files(plan.locust_values_files).get("config") or {}
    with tempfile.TemporaryDirectory() as tmp:
        sources: dict[str, tuple[Path, str]] = {}  # key -> (file to load, how to name it)
        for key, given in (("sla", plan.sla), ("sweep", plan.sweep)):
            if given is not None:
                sources[key] = (given, str(given))
            elif isinstance(embedded.get(key), str) and embedded[key].strip():
                f = Path(tmp) / f"{key}.yaml"
                f.write_text(embedded[key], encoding="utf-8")
                sources[key] = (f, f"{_values_file_with(plan.locust_values_files, key)}: config.{key}")
        try:
            # The suite image's workdir holds this repo's locustfiles/, next to the charts.
            cfg = load_sweep(sources["sweep"][0], plan.charts_dir.parent) if "sweep" in sources else None
            contract = load_contract(sources["sla"][0]) if "sla" in sources else None
        except UserError as e:
            for path, name in sources.values():
                e = UserError(str(e).replace(str(path), name))
            raise _one_line(e) from None
    if plan.kind == "sweep" and cfg is not None and contract is not None:
        load = contract.contract.load
        if load.concurrency is None or load.concurrency not in cfg.levels:
            what = f"{load.concurrency} is" if load.concurrency is not None else f"{load.label} is not a concurrency,"
            err = contract.error(("load", "concurrency"), f"{what} not one of the sweep's levels {cfg.levels}")
            raise UserError(str(err).replace(str(sources["sla"][0]), sources["sla"][1])) from None
    processes = cfg.run.processes if cfg is not None and plan.kind == "sweep" else None
    if contract is None:
        return None, processes
    # The contract is graded and priced as deployment.replicas: the release runs exactly that many, or nothing runs.
    want = contract.contract.deployment.replicas
    given = load_values_files(plan.serving_values_files).get("replicaCount")
    if given is not None and given != want:
        named = _values_file_with_key(plan.serving_values_files, "replicaCount")
        raise UserError(
            f"--serving-values {named}: replicaCount {given} is not the contract's deployment.replicas {want} "
            f"({sources['sla'][1]}) — the run would be graded and priced as {want}; make them agree"
        )
    _check_instance_family(plan, contract.contract.deployment.instance_type, sources["sla"][1])
    return int(want), processes


FAMILY_LABEL = "karpenter.k8s.aws/instance-family"


def _check_instance_family(plan: DeployPlan, instance_type: str, sla_name: str) -> None:
    """The serving values pin the GPU family (`nodeSelector`); the contract is graded and priced on its
    deployment.instance_type. Two families mean two cards (the GPU facts table names them): refused before any GPU
    starts, not found by provenance afterwards."""
    from slabench.fleet.facts import family_gpu, packaged_facts, split_instance_type

    selector = load_values_files(plan.serving_values_files).get("nodeSelector")
    family = selector.get(FAMILY_LABEL) if isinstance(selector, dict) else None
    contract_family = split_instance_type(instance_type)[0]
    if not isinstance(family, str) or family == contract_family:
        return
    facts = packaged_facts()
    deployed, graded = family_gpu(facts, family), family_gpu(facts, contract_family)
    if deployed is None or graded is None or deployed == graded:
        return  # the same card, or one the facts table does not know: nothing to say it is another card

    def card(key: str) -> str:
        return facts.gpus[key].name

    named = _values_file_with_key(plan.serving_values_files, "nodeSelector")
    raise UserError(
        f"--serving-values {named}: nodeSelector {FAMILY_LABEL} {family} ({card(deployed)}) is not the family of the "
        f"contract's deployment.instance_type {instance_type} ({card(graded)}, {sla_name}) — the run "
        f"would be graded and priced on another card; name a {family} size in the contract or use the "
        f"{contract_family} values"
    )


def _values_file_with_key(files: tuple[Path, ...], key: str) -> Path | None:
    """The last values file that sets a top-level key."""
    found = None
    for f in files:
        data = yamlio.load_data(f) or {}
        if isinstance(data, dict) and key in data:
            found = f
    return found


def _values_file_with(files: tuple[Path, ...], key: str) -> Path | None:
    """The last values file that sets config.<key> (the one Helm's merge keeps)."""
    found = None
    for f in files:
        data = yamlio.load_data(f) or {}
        if isinstance(data, dict) and key in (data.get("config") or {}):
            found = f
    return found


def _values_mention(files: tuple[Path, ...], key: str) -> bool:
    for f in files:
        data = yamlio.load_data(f) or {}
        if isinstance(data, dict) and key in data:
            return True
    return False


def merge_values(base: Values, override: Values) -> Values:
    """Helm's merge of values files: maps merge key by key, anything else (lists included) is replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = value
    return out


def load_values_files(files: tuple[Path, ...]) -> Values:
    merged: Values = {}
    for f in files:
        data = yamlio.load_data(f)
        if data is None:
            continue
        if not isinstance(data, dict):
            raise UserError(f"{f}: a values file must be a mapping of chart values")
        merged = merge_values(merged, data)
    return merged


def _put(values: Values, path: str, value: object) -> None:
    """Set a dotted key, skipping unset (None) flags so the chart default or the values files apply."""
    if value is None:
        return
    *parents, leaf = path.split(".")
    node = values
    for p in parents:
        node = node.setdefault(p, {})
    node[leaf] = value


def serving_overrides(plan: DeployPlan) -> Values:
    """Chart values that the command-line flags set on the serving chart (flags win over values files)."""
    # A benchmark measures a fixed replica count (the contract's deployment.replicas): no autoscaler may change it.
    v: Values = {"autoscaling": {"enabled": False}}
    _put(v, "replicaCount", plan.replicas)
    _put(v, "aws.region", plan.region)
    _put(v, "model.name", plan.model)
    _put(v, "model.revision", plan.revision)
    _put(v, "model.servedName", plan.served_name)
    if plan.weights:
        _put(v, "weightCache.bucket", plan.weights.bucket)
        _put(v, "weightCache.prefix", plan.weights.prefix)
    _put(v, "serviceAccount.roleArn", plan.serving_role_arn)
    _put(v, "apiKey.secretName", plan.api_key_secret)
    if plan.suite_image:
        _put(v, "weightCache.image", parse_image(plan.suite_image))
    if plan.serving_image:
        _put(v, "image", parse_image(plan.serving_image, "--serving-image"))
    return v


def locust_overrides(
    plan: DeployPlan, target_host: str, serving_selector: str | None = None, service_url: str | None = None
) -> Values:
    """Chart values for the headless Locust Job of this run (`serving_selector`: the serving pods' labels, whose nodes
    the run records as its provenance)."""
    v: Values = {"mode": "headless", "targetHost": target_host}
    _put(v, "provenance.servingSelector", serving_selector)
    _put(v, "aws.region", plan.region)
    _put(v, "apiKey.secretName", plan.api_key_secret)
    _put(v, "serviceAccount.roleArn", plan.locust_role_arn)
    _put(v, "headless.kind", CHART_KIND[plan.kind])
    # burst: the seed's queue, open loop, split across the workers; the shape ends the run once it has drained.
    _put(v, "shape", BURST_SHAPE if plan.kind == "burst" else "")
    _put(v, "headless.users", plan.users)
    _put(v, "headless.spawnRate", plan.spawn_rate)
    _put(v, "headless.runTime", plan.run_time)
    _put(v, "workers.replicas", plan.workers)
    if plan.suite_image:
        _put(v, "image", parse_image(plan.suite_image))
    if plan.sweep_processes:
        # The sweep runs its load in the Job pod: a core for each locust process and one for the master and grading.
        cores = plan.sweep_processes + 1
        _put(v, "master.resources", {"requests": {"cpu": str(cores), "memory": f"{cores}Gi"},
                                     "limits": {"memory": f"{2 * cores}Gi"}})  # fmt: skip
    # One run id for the records, the S3 prefix and the report (a sweep names its directory with it).
    _put(v, "headless.runId", plan.run_id)
    _put(v, "headless.extraArgs", run_args(plan, service_url, serving_selector))
    if plan.sla:
        _put(v, "config.sla", read_text(plan.sla))
    if plan.sweep:
        _put(v, "config.sweep", read_text(plan.sweep))
    if plan.run_results:
        _put(v, "results.s3Uri", f"{plan.run_results}/")
    return v


def run_args(plan: DeployPlan, service_url: str | None = None, serving_selector: str | None = None) -> list[str]:
    """The master's own flags for this run: the burst's time scale, and where the server's metrics are scraped."""
    args = ["--burst-time-scale", f"{plan.burst_time_scale:g}"] if plan.burst_time_scale is not None else []
    source = server_metrics_source(plan, service_url, serving_selector)
    if source:
        args += ["--server-metrics", source]
    return args


def server_metrics_source(plan: DeployPlan, service_url: str | None, serving_selector: str | None = None) -> str | None:
    """The server's /metrics from inside the cluster, never through the ALB (which routes only /v1): each serving
    pod's own, found by their labels (`pods:SELECTOR`) and summed, however many replicas run. Without the labels, the
    Service's with one replica (through a Service a scrape reaches a random pod, so with more replicas no scrape: a
    crosscheck against a random replica's counters would be wrong), and a sweep keeps its own default."""
    if serving_selector:
        return f"pods:{serving_selector}"
    if plan.kind == "sweep" or not service_url:
        return None
    if (plan.replicas or 1) > 1:
        return "off"
    return f"{service_url.rstrip('/')}/metrics"


def serving_values(plan: DeployPlan) -> Values:
    return merge_values(load_values_files(plan.serving_values_files), serving_overrides(plan))


def locust_values(
    plan: DeployPlan, target_host: str, serving_selector: str | None = None, service_url: str | None = None
) -> Values:
    overrides = locust_overrides(plan, target_host, serving_selector, service_url)
    files = load_values_files(plan.locust_values_files)
    # The run's own flags come after the values files' headless.extraArgs instead of replacing them.
    given = (files.get("headless") or {}).get("extraArgs") or []
    overrides["headless"]["extraArgs"] = [*given, *overrides["headless"]["extraArgs"]]
    return merge_values(files, overrides)


def parse_results_url(text: str | None) -> S3Url | None:
    return parse_s3_url(text, "--results-s3") if text else None


def parse_weights_url(text: str | None) -> S3Url | None:
    return parse_s3_url(text, "--weights-s3") if text else None
