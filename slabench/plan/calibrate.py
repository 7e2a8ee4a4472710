"""Fit a GPU profile to a measured server: the step time of the simulator's vLLM model, from a closed-loop sweep.

A user with one real server measures a few concurrency levels (`slabench sweep`), and `slabench calibrate` finds the
step time that makes the simulator reproduce them, so `slabench plan` can size fleets of that server.

- **What is fitted.** A linear step time (`StepTime`): overhead per step, cost per scheduled request (sampling,
  output processing), per token computed (prefill and decode alike), per token of context read (the KV cache of
  every scheduled request), per attention pair (prefill's quadratic term). The simulator's scheduler — continuous
  batching, chunked prefill at the server's `max_num_batched_tokens`, `max_num_seqs`, prefix caching — is kept;
  only its clock is measured.
- **How.** Each measured run is replayed in virtual time exactly as it ran: the same number of closed-loop users,
  the same requests in the order they were sent (prompt and output tokens as the server counted them), each user's
  measured pause between its requests (a starved client's users idle), the same number of requests. A request whose
  `item_id` repeats an earlier one shares its whole prompt with it (the server's prefix cache hits it). Nelder–Mead
  on the log coefficients minimises the squared log errors of TTFT p50, E2E p50 and throughput over the runs, from
  a start read off the least-loaded run (TTFT against prompt length, per-token decode time against context).
- **Cache size.** `--kv-cache-tokens` (vLLM logs it at start-up: "KV cache size: N tokens"), else estimated from the
  runs' `server_metrics.jsonl`: KV blocks held by the requests in flight at each scrape ÷ `kv_cache_usage_perc`.
- **Validation.** `--validate RUN_DIR…` replays further runs (e.g. higher levels) with the fitted profile, so the
  fit is judged on what it did not see.

Client-side times include what lies outside the engine (HTTP, templating, tokenising): the fit folds them into the
coefficients, which is what a plan against that server should predict.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from slabench.core.errors import UserError
from slabench.core.record import RequestRecord
from slabench.plan.replay import replay, type7
from slabench.plan.workload import Mix, PlannedLoad
from slabench.sim.profiles import EngineConfig, EngineOptions, GpuProfile, ModelProfile, StepTime

FIT_METRICS = ("ttft_p50", "e2e_p50", "throughput_rps")
PARAMS = ("overhead_ms", "per_sequence_us", "per_token_us", "per_context_token_ns", "per_attention_pair_ns")


@dataclass
class MeasuredRun:
    source: str
    users: int
    mix: Mix  # the OK requests in the order they were sent
    figures: dict[str, float]
    ttft_s: np.ndarray  # per request, in send order
    decode_s_per_token: np.ndarray  # (end − first token) / (output tokens − 1), per request
    after_s: np.ndarray | None = None  # per request: how long its user waited after it ended before sending again
    in_flight: list[tuple[float, float, list[tuple[float, int, int]]]] = field(default_factory=list)
    models: frozenset[str] = frozenset()  # the served model each record names

    @property
    def requests(self) -> int:
        return len(self.mix)


def _run_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise UserError(f"{path}: no such run directory or records file")
    for name in ("records.jsonl", "records.parquet"):
        if (path / name).exists():
            return [path / name]
    found = sorted(path.glob("*/*/records.jsonl")) + sorted(path.glob("*/*/records.parquet"))
    if not found:
        raise UserError(f"{path}: no records.jsonl/records.parquet in it or in its <level>/<repeat>/ folders")
    return found


def read_runs(paths: list[str | Path]) -> list[MeasuredRun]:
    """Every run under the paths (a sweep directory, run directories, or records files)."""
    return [read_run(f) for p in paths for f in _run_files(Path(p))]


def check_one_model(runs: list[MeasuredRun]) -> None:
    """One profile describes one served model: runs of two would fit a step time that is neither's."""
    where: dict[str, str] = {}
    for r in runs:
        for m in sorted(r.models):
            where.setdefault(m, r.source)
    if len(where) > 1:
        (a, at), (b, bt) = sorted(where.items())[:2]
        raise UserError(
            f"the runs served different models: {a!r} ({at}) and {b!r} ({bt}); calibrate one model's runs at a time"
        )


def read_run(path: Path) -> MeasuredRun:
    from slabench.core.sinks import read_records

    records = read_records(path)
    ok = sorted(
        (r for r in records if r.outcome == "ok" and r.prompt_tokens and r.completion_tokens),
        key=lambda r: math.inf if r.sent is None else r.sent,  # a record without one is refused below
    )
    if len(ok) < 4:
        raise UserError(f"{path}: {len(ok)} answered request(s) with the server's token counts; need at least 4")
    if any(r.token_source != "server" for r in ok):
        raise UserError(f"{path}: token counts are estimates, not the server's usage — calibrate needs the server's")
    if any(r.scheduled is not None for r in ok):
        raise UserError(f"{path}: an open-loop run (scheduled requests); calibrate replays closed-loop sweeps")
    users = {r.stage_level for r in ok}
    if len(users) != 1 or None in users:
        users = {len({r.user_id for r in ok})}
    (level,) = users
    first_of: dict[str, int] = {}
    prompt, output, prefix, keys = [], [], [], []
    for i, r in enumerate(ok):
        assert r.prompt_tokens and r.completion_tokens  # `ok` keeps only records with both
        prompt.append(r.prompt_tokens)
        output.append(r.completion_tokens)
        if r.item_id is not None and r.item_id in first_of:  # the same prompt again: the server's cache has it
            keys.append(f"item/{r.item_id}")
            prefix.append(r.prompt_tokens)
        else:
            keys.append(f"item/{r.item_id}" if r.item_id is not None else f"req/{i}")
            prefix.append(r.prompt_tokens if r.item_id is not None else 0)
            if r.item_id is not None:
                first_of[r.item_id] = i
    mix = Mix(
        prompt_tokens=np.array(prompt, dtype=np.int64),
        output_tokens=np.array(output, dtype=np.int64),
        prefix_tokens=np.array(prefix, dtype=np.int64),
        accounts=tuple(keys),
        max_tokens=max(max(r.max_tokens or 0 for r in ok), max(output)),
        source=str(path),
    )
    sent, end = np.array([r.sent for r in ok]), np.array([r.end for r in ok])
    # An answer with no visible text (a model whose first token was its end) has no first token of its own: its
    # one token came with the end. It still loaded the server, so it stays in the mix.
    first = np.array([r.end if r.first_token is None else r.first_token for r in ok])
    for name, times in (("sent", sent), ("first_token", first), ("end", end)):
        bad = np.flatnonzero(~np.isfinite(times.astype(float)))
        if len(bad):
            raise UserError(
                f"{path}: request {ok[bad[0]].request_id}: {name} is {times[bad[0]]} — not a time; a record edited by "
                "hand or damaged: drop it, or calibrate from another run"
            )
    if not (sent <= first).all() or not (first <= end).all():
        i = int(np.flatnonzero((sent > first) | (first > end))[0])
        raise UserError(
            f"{path}: request {ok[i].request_id}: times out of order (sent ≤ first_token ≤ end does not hold): a "
            "record edited by hand or damaged — drop it, or calibrate from another run"
        )
    span = float(end.max() - sent.min())
    figures = {
        "ttft_p50": type7(np.sort(first - sent), 0.5),
        "e2e_p50": type7(np.sort(end - sent), 0.5),
        "throughput_rps": len(ok) / span,
        "output_tokens_per_s": sum(output) / span,
    }
    assert level is not None  # (a run without its level is sized by its users above)
    run = MeasuredRun(
        str(path.parent if path.name.startswith("records.") else path),
        int(level),
        mix,
        figures,
        ttft_s=first - sent,
        decode_s_per_token=(end - first) / np.maximum(mix.output_tokens - 1, 1),
        after_s=user_gaps(ok),
        models=frozenset(r.model for r in ok if r.model),
    )
    run.in_flight = _kv_samples(path, ok)
    return run


def measurement_doubts(runs: list[MeasuredRun]) -> list[str]:
    """Runs whose own status says their times measure the machine too (a starved load generator, a lost worker):
    a fit to them learns that machine as well as the server."""
    from slabench.evidence.run_status import MeasurementPolicy, run_evidence, saturation_reasons

    out = []
    for run in runs:
        directory = Path(run.source)
        if directory.is_dir():
            incomplete, saturation = run_evidence(directory)
            for why in [*incomplete, *saturation_reasons(saturation, MeasurementPolicy())]:
                out.append(f"{run.source}: {why} — the fit learns this machine as well as the server")
    return out


def user_gaps(ok: list[RequestRecord]) -> np.ndarray:
    """Per request (in send order): the time its user took after it ended to send the next one (0 for a user's last).
    A closed-loop user waits for nothing, but a client short of CPU does: beside vLLM on two cores, users idled up
    to 1.3 s between requests. The replay keeps those gaps, so the server is fitted to the load it really got."""
    gaps = np.zeros(len(ok))
    last: dict[str | None, int] = {}
    for i, r in enumerate(ok):
        j = last.get(r.user_id)
        if j is not None:
            sent, before = r.sent, ok[j].end
            assert sent is not None and before is not None  # read_run refuses a record without its times
            gaps[j] = max(0.0, sent - before)
        last[r.user_id] = i
    return gaps


def _kv_samples(path: Path, ok: list[RequestRecord]) -> list[tuple[float, float, list[tuple[float, int, int]]]]:
    """(scrape time on the records' clock, kv_cache_usage_perc, [(sent, prompt, chunk count)...]) per scrape."""
    metrics = path.parent / "server_metrics.jsonl"
    if not metrics.exists():
        return []
    from slabench.evidence.scrape import read_scrapes

    anchor = next((r for r in ok if r.wall_sent is not None), None)
    if anchor is None:
        return []
    out = []
    for s in read_scrapes(metrics):
        usage = s.get("gauges", {}).get("kv_cache_usage_perc")
        if not usage:
            continue
        t = s["t"] - anchor.wall_sent + anchor.sent  # wall clock → the records' monotonic clock
        held: list[tuple[float, int, int]] = []
        for r in ok:
            if r.first_token is not None and r.end is not None and r.first_token <= t < r.end:
                done = sum(1 for c in r.chunk_times if c <= t)
                assert r.sent is not None and r.prompt_tokens is not None  # read_run keeps only such records
                held.append((r.sent, r.prompt_tokens, done))
        if held:
            out.append((t, float(usage), held))
    return out


def estimate_kv_tokens(runs: list[MeasuredRun], block_size: int = 16) -> int | None:
    """The cache size implied by the servers' KV usage gauge and the requests in flight at each scrape (median)."""
    estimates = []
    for run in runs:
        for _, usage, held in run.in_flight:
            blocks = sum(math.ceil((p + done) / block_size) for _, p, done in held)
            if usage > 0.002 and blocks:
                estimates.append(blocks / usage * block_size)
    return int(np.median(estimates)) if estimates else None


# -- the model -------------------------------------------------------------------------------------------------------
def model_from_config(path: str | Path, max_model_len: int | None = None) -> ModelProfile:
    """A model profile from a Hugging Face `config.json` (Llama-style keys)."""
    import json

    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        cfg = json.loads(p.read_text())
        hidden, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
        heads = int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads", heads))
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        inter, vocab = int(cfg["intermediate_size"]), int(cfg["vocab_size"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"--model-config {p}: not a readable Llama-style config.json ({e})") from None
    attn = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    params = layers * (attn + 3 * hidden * inter) + vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    nbytes = 4 if "32" in dtype else 2
    return ModelProfile(
        kind="model",
        name=p.parent.name or "measured-model",
        description=f"from {p}: {layers} layers, hidden {hidden}, {heads} heads ({kv_heads} KV), {params:,} parameters",
        source=str(p),
        params_b=params / 1e9,
        weight_bytes_per_param=nbytes,
        num_layers=layers,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        kv_cache_dtype_bytes=nbytes if nbytes in (1, 2, 4) else 2,
        activation_kib_per_batched_token=0,
        max_model_len=int(max_model_len or cfg.get("max_position_embeddings", 4096)),
    )


def gpu_profile(name: str, step: StepTime, options: EngineOptions, source: str, description: str = "") -> GpuProfile:
    return GpuProfile(kind="gpu", name=name, description=description, source=source, step_time=step, engine=options)


def simulate(run: MeasuredRun, gpu: GpuProfile, model: ModelProfile) -> dict[str, float]:
    """The run replayed on the profile: the same users, requests (in send order) and request count."""
    config = EngineConfig(gpu=gpu, model=model, options=gpu.engine)
    load = PlannedLoad("measured", run.source, run.mix, users=run.users, max_requests=run.requests, after_s=run.after_s)
    p = replay(config, load, 1, drain_timeout=1e6)
    ttft, e2e = p.figures["ttft_p50"], p.figures["e2e_p50"]
    if ttft is None or e2e is None:  # every request refused: longer than the model's context
        raise UserError(
            f"{run.source}: the model's max_model_len ({model.max_model_len} tokens) is shorter than every request of "
            f"the run (prompt + max_tokens {run.mix.max_tokens}): give the server's --max-model-len"
        )
    span = p.end - p.first_arrival
    return {
        "ttft_p50": ttft,
        "e2e_p50": e2e,
        "throughput_rps": p.ok / span if span > 0 else math.inf,
        "output_tokens_per_s": p.output_tokens / span if span > 0 else math.inf,
    }


# -- the fit ---------------------------------------------------------------------------------------------------------
def _step(x: np.ndarray) -> StepTime:
    return StepTime(**dict(zip(PARAMS, np.exp(x).tolist(), strict=True)))


def initial_guess(runs: list[MeasuredRun]) -> StepTime:
    """From the run with the fewest users: TTFT ≈ overhead + per token × prompt; the rest of a request ≈ per
    output token × (overhead + per sequence + per context token × context)."""
    run = min(runs, key=lambda r: r.users)
    p = run.mix.prompt_tokens.astype(float)
    ttft = run.ttft_s
    a, o = np.polyfit(p, ttft, 1) if len(set(p)) > 1 else (ttft.mean() / p.mean(), 0.0)
    per_out = run.decode_s_per_token
    ctx = p + run.mix.output_tokens / 2
    c, base = np.polyfit(ctx, per_out, 1) if len(set(ctx)) > 1 else (0.0, per_out.mean())
    overhead = max(min(base, max(o, 1e-4)), 1e-4)
    return StepTime(
        overhead_ms=overhead * 1e3,
        per_sequence_us=max(base - overhead, 1e-5) * 1e6,
        per_token_us=max(a, 1e-8) * 1e6,
        per_context_token_ns=max(c, 1e-12) * 1e9,
        per_attention_pair_ns=1e-3,
    )


@dataclass
class Fit:
    step: StepTime
    loss: float
    evaluations: int
    rows: list[tuple[MeasuredRun, dict[str, float]]]  # each fitted run with its simulated figures


def _errors(measured: dict[str, float], simulated: dict[str, float]) -> list[float]:
    return [math.log(simulated[m] / measured[m]) for m in FIT_METRICS if measured[m] > 0 and simulated[m] > 0]


def fit(runs: list[MeasuredRun], model: ModelProfile, options: EngineOptions, iterations: int = 160) -> Fit:
    start = initial_guess(runs)
    x0 = np.log([getattr(start, k) for k in PARAMS])

    def loss(x: np.ndarray) -> float:
        gpu = gpu_profile("fit", _step(x), options, "fit")
        total = 0.0
        for run in runs:
            total += sum(e * e for e in _errors(run.figures, simulate(run, gpu, model)))
        return total

    x, value, evals = nelder_mead(loss, x0, step=1.0, iterations=iterations)
    best = _step(x)
    gpu = gpu_profile("fit", best, options, "fit")
    return Fit(best, value, evals, [(run, simulate(run, gpu, model)) for run in runs])


def nelder_mead(
    f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.5, iterations: int = 200, tol: float = 1e-6
) -> tuple[np.ndarray, float, int]:
    """Minimise f from x0 (the standard reflect / expand / contract / shrink simplex). Returns (x, f(x), calls)."""
    n = len(x0)
    simplex = [np.array(x0, float)] + [np.array(x0, float) + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    calls = n + 1
    for _ in range(iterations):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) <= tol * (abs(values[0]) + tol):
            break
        centroid = np.mean(simplex[:-1], axis=0)
        reflected = centroid + (centroid - simplex[-1])
        fr = f(reflected)
        calls += 1
        if fr < values[0]:
            expanded = centroid + 2.0 * (centroid - simplex[-1])
            fe = f(expanded)
            calls += 1
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (simplex[-1] - centroid)
            fc = f(contracted)
            calls += 1
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best] + [best + 0.5 * (x - best) for x in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
                calls += n
    i = int(np.argmin(values))
    return simplex[i], values[i], calls


# -- the interval ----------------------------------------------------------------------------------------------------
INTERVAL = 0.90
INTERVAL_METRICS = ("throughput_rps", "ttft_p50", "e2e_p50")
# A fit the runs barely pin (as many coefficients as figures, a coefficient no run moves) has no finite interval:
# ×10⁶ either way stands for "unbounded" and keeps the arithmetic and the JSON finite.
MAX_LOG_WIDTH = math.log(1e6)
PINNED = 1e-6  # JᵀJ's smallest singular value, relative to its largest, a coefficient counts as pinned by the runs


def repeat_variance(runs: list[MeasuredRun]) -> tuple[dict[str, float], int]:
    """The run-to-run spread: per metric, the pooled variance of the log measured figure among runs at the same
    number of users (a level measured twice or more), and its degrees of freedom (0: no level was repeated)."""
    groups: dict[int, list[MeasuredRun]] = {}
    for run in runs:
        groups.setdefault(run.users, []).append(run)
    dof = sum(len(g) - 1 for g in groups.values() if len(g) > 1)
    out = {}
    for m in INTERVAL_METRICS:
        ss = 0.0
        for g in groups.values():
            logs = np.log([r.figures[m] for r in g if r.figures[m] > 0])
            if len(logs) > 1:
                ss += float(((logs - logs.mean()) ** 2).sum())
        out[m] = ss / dof if dof else 0.0
    return out, dof


def parameter_covariance(jacobian: np.ndarray, residuals: np.ndarray) -> tuple[np.ndarray, float, int]:
    """Least squares' covariance of the fitted parameters, s² (JᵀJ)⁺, with s² = Σ r² / (observations − parameters):
    the residuals' variance and how little each parameter is pinned by the runs. Returns (covariance, s², dof).

    A combination of coefficients the runs move a million times less than the best-pinned one (JᵀJ's singular
    values, relative: a coefficient such as the attention term when no prompt is long) is left out of the
    pseudo-inverse: it does not matter to these runs, and the finite differences' noise along it would otherwise
    make every interval unbounded."""
    dof = max(len(residuals) - jacobian.shape[1], 1)
    s2 = float(residuals @ residuals) / dof
    return s2 * np.linalg.pinv(jacobian.T @ jacobian, rcond=PINNED), s2, dof


def half_width(gradient: np.ndarray, covariance: np.ndarray, noise_variance: float, dof: int) -> float:
    """The 90 % prediction interval's half-width, in log units, of a figure whose log has this gradient in the
    parameters: t(0.95, dof) · √(gᵀ Σ g + the variance of one new run). The first term grows the farther a run lies
    from those fitted (an extrapolation); the second is the noise no fit removes."""
    from slabench.analysis.stats import t_ppf

    var = float(gradient @ covariance @ gradient) + noise_variance
    width = t_ppf(0.5 + INTERVAL / 2, dof) * math.sqrt(max(var, 0.0))
    return min(width, MAX_LOG_WIDTH) if math.isfinite(width) else MAX_LOG_WIDTH


@dataclass
class Calibration:
    """What the fit knows of its own error: the parameters' covariance from its residuals, and per metric the
    variance of one new run — the larger of the residuals' (misfit and noise) and the repeats' (noise alone)."""

    x: np.ndarray  # the fitted log coefficients
    covariance: np.ndarray
    noise: dict[str, float]
    residual_variance: dict[str, float]
    repeat_variance: dict[str, float]
    dof: int

    def gradient(self, run: MeasuredRun, model: ModelProfile, options: EngineOptions, h: float = 0.1) -> np.ndarray:
        """∂ log figure / ∂ log coefficient, central differences (rows: INTERVAL_METRICS)."""
        cols = []
        for i in range(len(self.x)):
            up, down = self.x.copy(), self.x.copy()
            up[i] += h
            down[i] -= h
            hi, lo = _log_figures(run, up, model, options), _log_figures(run, down, model, options)
            cols.append((hi - lo) / (2 * h))
        return np.array(cols).T

    def intervals(
        self, run: MeasuredRun, model: ModelProfile, options: EngineOptions
    ) -> dict[str, tuple[float, float, float]]:
        """Per metric: (predicted, 90 % low, 90 % high)."""
        predicted = _log_figures(run, self.x, model, options)
        g = np.nan_to_num(self.gradient(run, model, options), nan=0.0, posinf=0.0, neginf=0.0)
        out = {}
        for k, m in enumerate(INTERVAL_METRICS):
            w = half_width(g[k], self.covariance, self.noise[m], self.dof)
            out[m] = (math.exp(predicted[k]), math.exp(predicted[k] - w), math.exp(predicted[k] + w))
        return out


def _log_figures(run: MeasuredRun, x: np.ndarray, model: ModelProfile, options: EngineOptions) -> np.ndarray:
    sim = simulate(run, gpu_profile("fit", _step(x), options, "fit"), model)
    return np.log([min(max(sim[m], 1e-12), 1e12) for m in INTERVAL_METRICS])


def calibration(runs: list[MeasuredRun], result: Fit, model: ModelProfile, options: EngineOptions) -> Calibration:
    """The fit's error model, from its residuals on the runs it was fitted to and their repeats' spread."""
    x = np.log([getattr(result.step, k) for k in PARAMS])
    probe = Calibration(x, np.zeros((len(x), len(x))), {}, {}, {}, 1)
    rows, residuals = [], []
    by_metric: dict[str, list[float]] = {m: [] for m in INTERVAL_METRICS}
    for run, sim in result.rows:
        g = probe.gradient(run, model, options)
        for k, m in enumerate(INTERVAL_METRICS):
            if 0 < run.figures[m] < math.inf and 0 < sim[m] < math.inf and np.isfinite(g[k]).all():
                r = math.log(sim[m] / run.figures[m])
                rows.append(g[k])
                residuals.append(r)
                by_metric[m].append(r)
    if not residuals:  # nothing finite to judge the fit by: an interval as wide as there is
        unbounded = {m: (MAX_LOG_WIDTH / 1.645) ** 2 for m in INTERVAL_METRICS}
        return Calibration(x, np.zeros((len(x), len(x))), unbounded, unbounded, repeat_variance(runs)[0], 1)
    covariance, _, dof = parameter_covariance(np.array(rows), np.array(residuals))
    share = dof / len(residuals)  # each metric's residuals carry their share of the degrees of freedom
    resid = {m: float(np.sum(np.square(v))) / max(len(v) * share, 1e-9) for m, v in by_metric.items()}
    repeats, _ = repeat_variance(runs)
    noise = {m: max(resid[m], repeats[m]) for m in INTERVAL_METRICS}
    return Calibration(x, covariance, noise, resid, repeats, dof)


# -- the profile file ------------------------------------------------------------------------------------------------
def rates(step: StepTime, context: float) -> dict[str, float]:
    """Derived: prefill tokens/s (one long prompt), and decode tokens/s of one request alone at this context."""
    prefill = 1e6 / step.per_token_us if step.per_token_us > 0 else math.inf
    decode_s = (
        step.overhead_ms * 1e-3
        + step.per_sequence_us * 1e-6
        + step.per_token_us * 1e-6
        + (step.per_context_token_ns + step.per_attention_pair_ns) * 1e-9 * context
    )
    return {"prefill_tokens_per_s": prefill, "decode_tokens_per_s_alone": 1.0 / decode_s, "context": context}


def profile_yaml(profile: GpuProfile, header: list[str]) -> str:
    """The GPU profile as YAML (strict keys, loadable by `slabench plan --profiles FILE`), with `header` comments."""
    import yaml

    data = profile.model_dump(exclude_none=True, exclude_defaults=True, mode="json")
    data = {"kind": "gpu", **{k: v for k, v in data.items() if k != "kind"}}
    if "step_time" in data:  # four significant digits: the fit is not finer than that
        data["step_time"] = {k: float(f"{v:.4g}") for k, v in data["step_time"].items()}
    lines = [f"# {h}" for h in header]
    return "\n".join(lines) + "\n" + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=118)


def model_yaml(model: ModelProfile) -> str:
    import yaml

    data = model.model_dump(mode="json")
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=118)
