"""`slabench calibrate`'s parts: reading measured runs, the model profile from a config.json, and the fit — which,
given runs the simulator itself produced with a known step time, must reproduce them and predict the levels it was
not shown."""

from __future__ import annotations

import json

import numpy as np
import pytest

from slabench.core.errors import UserError
from slabench.core.record import RequestRecord
from slabench.core.sinks import open_sink
from slabench.plan.calibrate import (
    MeasuredRun,
    fit,
    gpu_profile,
    measurement_doubts,
    model_from_config,
    read_run,
    read_runs,
    simulate,
)
from slabench.plan.workload import Mix
from slabench.sim.profiles import EngineOptions, StepTime

TRUE = StepTime(overhead_ms=6.0, per_sequence_us=300.0, per_token_us=90.0, per_context_token_ns=40.0)
OPTIONS = EngineOptions(num_gpu_blocks_override=20000, max_num_seqs=64, max_num_batched_tokens=2048)


def tiny_model(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "hidden_size": 256,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "intermediate_size": 512,
                "vocab_size": 4096,
                "tie_word_embeddings": True,
                "max_position_embeddings": 8192,
                "torch_dtype": "bfloat16",
            }
        )
    )
    return model_from_config(tmp_path)


def test_the_model_profile_from_a_config(tmp_path):
    m = tiny_model(tmp_path)
    # per layer: q, k, v, o = 4 × 256 × 256; the MLP 3 × 256 × 512; tied embeddings 4096 × 256
    assert m.params_b * 1e9 == pytest.approx(2 * (4 * 256 * 256 + 3 * 256 * 512) + 4096 * 256)
    assert (m.num_layers, m.num_kv_heads, m.head_dim, m.max_model_len) == (2, 4, 64, 8192)


def synthetic_runs(model, levels, n=40) -> list[MeasuredRun]:
    """Runs 'measured' on a server whose step time is TRUE: the simulator's own figures."""
    rng = np.random.default_rng(5)
    prompt = rng.integers(200, 3000, n)
    output = rng.integers(16, 128, n)
    mix = Mix(prompt, output, np.zeros(n, dtype=np.int64), tuple(f"r{i}" for i in range(n)), 128, "synthetic")
    truth = gpu_profile("truth", TRUE, OPTIONS, "test")
    runs = []
    for users in levels:
        run = MeasuredRun(
            f"level {users}",
            users,
            mix,
            {},
            ttft_s=TRUE.overhead_ms * 1e-3 + prompt * TRUE.per_token_us * 1e-6,  # what level 1 shows, roughly
            decode_s_per_token=np.full(n, (TRUE.overhead_ms * 1e-3 + 4e-4)),
        )
        run.figures = simulate(run, truth, model)
        runs.append(run)
    return runs


def test_the_fit_reproduces_the_runs_and_predicts_higher_levels(tmp_path):
    model = tiny_model(tmp_path)
    runs = synthetic_runs(model, (1, 2, 4))
    result = fit(runs, model, OPTIONS, iterations=80)
    for run, sim in result.rows:
        for k in ("ttft_p50", "e2e_p50", "throughput_rps"):
            assert sim[k] == pytest.approx(run.figures[k], rel=0.03), (run.users, k)
    fitted = gpu_profile("fit", result.step, OPTIONS, "test")
    for run in synthetic_runs(model, (8, 16)):
        predicted = simulate(run, fitted, model)
        assert predicted["throughput_rps"] == pytest.approx(run.figures["throughput_rps"], rel=0.05), run.users
        assert predicted["ttft_p50"] == pytest.approx(run.figures["ttft_p50"], rel=0.10), run.users


def record(i: int, sent: float, prompt: int = 500, out: int = 20, **kw) -> RequestRecord:
    first = sent + 0.1
    end = first + 0.01 * (out - 1)
    fields = dict(
        run_id="r", request_id=f"q{i}", user_id=f"local/{i % 2}", stage_level=2, sent=sent, first_token=first,
        last_token=end, end=end, chunk_times=tuple(first + 0.01 * k for k in range(out)), prompt_tokens=prompt,
        completion_tokens=out, token_source="server", max_tokens=out, wall_sent=1e9 + sent, item_id=f"p{i % 3}",
    )  # fmt: skip
    return RequestRecord(**{**fields, **kw})


def write(tmp_path, records) -> None:
    (tmp_path / "records.jsonl").unlink(missing_ok=True)  # a fresh file: the sink appends
    sink = open_sink(tmp_path / "records.jsonl")
    sink.write(records)
    sink.close()


def test_a_measured_run_is_read_in_send_order_with_its_figures(tmp_path):
    write(tmp_path, [record(i, sent=0.3 * i) for i in reversed(range(10))])
    run = read_run(tmp_path / "records.jsonl")
    assert run.users == 2 and run.requests == 10
    assert run.figures["ttft_p50"] == pytest.approx(0.1)
    assert run.figures["throughput_rps"] == pytest.approx(10 / (2.7 + 0.1 + 0.19))
    # a prompt sent again (same item id) is one the server's prefix cache holds whole
    assert list(run.mix.prefix_tokens[:4]) == [500, 500, 500, 500] and run.mix.accounts[3] == "item/p0"
    # each user sent every 0.6 s and each request took 0.29 s: it waited 0.31 s after each (none after its last)
    assert run.after_s is not None
    assert run.after_s[:8] == pytest.approx([0.31] * 8) and list(run.after_s[8:]) == [0.0, 0.0]


def test_a_max_model_len_shorter_than_every_request_is_one_line_not_a_traceback(tmp_path):
    write(tmp_path, [record(i, sent=0.3 * i) for i in range(10)])
    run = read_run(tmp_path / "records.jsonl")
    model = tiny_model(tmp_path).model_copy(update={"max_model_len": 400})  # the prompts are 500 tokens
    with pytest.raises(UserError, match=r"max_model_len \(400 tokens\) is shorter than every request"):
        fit([run], model, OPTIONS, iterations=2)


def test_an_answer_with_no_visible_text_is_read_not_a_traceback(tmp_path):
    """The live tier's random model sometimes answers with its end token first: usage says 1 token, no content came,
    so the record has no first token (CI, 2026-12-05: `calibrate --validate` died on it)."""
    eos_only = record(4, sent=1.2, out=1, first_token=None, chunk_times=(), last_token=None)
    write(tmp_path, [*(record(i, sent=0.3 * i) for i in range(10) if i != 4), eos_only])
    run = read_run(tmp_path / "records.jsonl")
    assert run.requests == 10
    assert run.ttft_s[4] == pytest.approx(eos_only.end - eos_only.sent) and run.decode_s_per_token[4] == 0
    assert run.figures["ttft_p50"] == pytest.approx(0.1)


def test_a_users_measured_gaps_are_replayed(tmp_path):
    """A closed-loop user that idled between requests (a starved client) offered the server less load: one user,
    0.5 s after each of 40 requests, takes 39 × 0.5 s longer and the requests themselves are no faster or slower."""
    model = tiny_model(tmp_path)
    (run,) = synthetic_runs(model, (1,))
    truth = gpu_profile("truth", TRUE, OPTIONS, "test")
    back_to_back = simulate(run, truth, model)
    run.after_s = np.full(run.requests, 0.5)
    idling = simulate(run, truth, model)
    span = run.requests / back_to_back["throughput_rps"]
    assert run.requests / idling["throughput_rps"] == pytest.approx(span + 0.5 * (run.requests - 1))
    assert idling["e2e_p50"] == pytest.approx(back_to_back["e2e_p50"])


def test_runs_whose_status_doubts_their_times_are_named(tmp_path):
    from slabench.evidence.run_status import RunStatus, Saturation, write_run_status

    write(tmp_path, [record(i, sent=0.3 * i) for i in range(10)])
    assert measurement_doubts(read_runs([tmp_path])) == []
    starved = Saturation(loop_late_s=3.1, loop_late_max_s=1.2, loop_span_s=10.0, cpu_wait_s=2.0, cpu_wait_runs=900)
    write_run_status(tmp_path, RunStatus(run_id="r", records=10, saturation=starved))
    (why,) = measurement_doubts(read_runs([tmp_path]))
    assert "event loop ran late" in why and "learns this machine" in why


def test_runs_calibrate_cannot_use_are_refused(tmp_path):
    write(tmp_path, [record(i, sent=0.3 * i) for i in range(3)])
    with pytest.raises(UserError, match="3 answered request"):
        read_run(tmp_path / "records.jsonl")
    write(tmp_path, [record(i, sent=0.3 * i, token_source="estimate") for i in range(6)])
    with pytest.raises(UserError, match="not the server's usage"):
        read_run(tmp_path / "records.jsonl")


def test_a_straight_lines_prediction_interval_is_the_textbook_one():
    """Least squares on y = a + b·x at x = 0, 1, 2, 3: the 90 % prediction interval at x0 = 5 is
    t(0.95, 2) · s · √(1 + 1/n + (x0 − x̄)² / Sxx), s² = Σr² / (n − 2) — here s² = 0.2 / 2."""
    from slabench.plan.calibrate import half_width, parameter_covariance

    x = np.array([0.0, 1.0, 2.0, 3.0])
    jacobian = np.column_stack([np.ones(4), x])
    residuals = np.array([0.1, -0.3, 0.3, -0.1])
    assert jacobian.T @ residuals == pytest.approx([0, 0])  # least squares' residuals: orthogonal to the fit
    covariance, s2, dof = parameter_covariance(jacobian, residuals)
    assert (s2, dof) == (pytest.approx(0.2 / 2), 2)
    se = np.sqrt(0.1 * (1 + 1 / 4 + 3.5**2 / 5))
    assert half_width(np.array([1.0, 5.0]), covariance, s2, dof) == pytest.approx(2.919986 * se, rel=1e-6)
    # at the data's centre the parameters' share is the smallest: 1/n
    assert half_width(np.array([1.0, 1.5]), covariance, s2, dof) == pytest.approx(2.919986 * np.sqrt(0.1 * 1.25))


def test_the_run_to_run_spread_pools_repeats_of_a_level(tmp_path):
    from slabench.plan.calibrate import repeat_variance

    model = tiny_model(tmp_path)
    a, b, c = synthetic_runs(model, (1, 1, 4), n=8)
    a.figures["throughput_rps"] = 1.0
    b.figures["throughput_rps"] = float(np.e)  # logs 0 and 1: variance ((−½)² + (½)²) / 1 = ½
    variance, dof = repeat_variance([a, b, c])
    assert dof == 1 and variance["throughput_rps"] == pytest.approx(0.5)
    assert repeat_variance([a, c])[1] == 0  # no level repeated: no spread measured


def test_held_out_levels_fall_in_the_calibrations_interval(tmp_path):
    """Levels 1, 2, 4 measured twice each, the repeats ±6 % apart (a noisy server); the interval from the fit's
    residuals and that spread holds levels 8 and 16 of the true server, and is wider than the spread alone."""
    from slabench.plan.calibrate import calibration

    model = tiny_model(tmp_path)
    runs = []
    for sign in (1, -1):
        for run in synthetic_runs(model, (1, 2, 4)):
            run.figures = {k: v * (1 + 0.06 * sign) for k, v in run.figures.items()}
            runs.append(run)
    result = fit(runs, model, OPTIONS, iterations=80)
    cal = calibration(runs, result, model, OPTIONS)
    spread = np.log(1.06 / 0.94) / np.sqrt(2)  # two logs d apart: sample variance d² / 2
    assert np.sqrt(cal.repeat_variance["throughput_rps"]) == pytest.approx(spread)
    for run in synthetic_runs(model, (8, 16)):
        for metric, (predicted, lo, hi) in cal.intervals(run, model, OPTIONS).items():
            assert lo < run.figures[metric] < hi, (run.users, metric, lo, run.figures[metric], hi)
            assert lo < predicted < hi and np.log(hi / predicted) > 1.645 * spread, (run.users, metric)


def test_the_interval_report_counts_held_out_figures_inside_and_their_median_error(tmp_path):
    from slabench.plan.calibrate_cli import coverage_line, interval_report

    model = tiny_model(tmp_path)
    fitted, a, b = synthetic_runs(model, (1, 8, 16), n=8)
    for run, tput in ((fitted, 1.0), (a, 10.0), (b, 20.0)):
        run.figures = {"throughput_rps": tput, "ttft_p50": 0.1, "e2e_p50": 1.0}
    iv = {  # predicted, low, high
        "throughput_rps": [(1.0, 0.9, 1.1), (11.0, 9.0, 13.0), (16.0, 14.0, 18.0)],  # 20 is outside (−20 %)
        "ttft_p50": [(0.1, 0.09, 0.11), (0.11, 0.08, 0.14), (0.095, 0.07, 0.12)],
        "e2e_p50": [(1.0, 0.9, 1.1), (1.2, 0.9, 1.5), (0.9, 0.8, 1.1)],
    }
    judged = [(kind, run, {m: v[k] for m, v in iv.items()}) for k, (kind, run) in
              enumerate((("fit", fitted), ("validate", a), ("validate", b)))]  # fmt: skip
    report = interval_report(judged)
    held = report["held_out"]
    assert (held["figures"], held["inside"]) == (6, 5)  # the fitted run is not held out
    assert held["median_abs_error"]["throughput_rps"] == pytest.approx((0.1 + 0.2) / 2)
    assert held["median_abs_error"]["ttft_p50"] == pytest.approx((0.1 + 0.05) / 2)
    assert not report["runs"][2]["figures"]["throughput_rps"]["inside"]
    assert coverage_line(held).startswith("held-out: 5 of 6 figures inside their 90 % interval (83%)")


def test_calibrate_writes_the_intervals_and_the_profiles_uncertainty(tmp_path, capsys):
    """Four runs fitted, one validated: the profile states its step-time factor (from this calibration, not the
    public-figure default) and the intervals file judges the held-out run's three figures."""
    from slabench.commands.cli import main
    from slabench.sim.profiles import DEFAULT_STEP_TIME_FACTOR_90, load_gpu_profile

    dirs = []
    for k, (gap, prompt) in enumerate(((0.3, 400), (0.31, 420), (0.25, 600), (0.26, 610), (0.2, 900))):
        d = tmp_path / f"run{k}"
        d.mkdir()
        write(d, [record(i, sent=gap * i, prompt=prompt + 7 * i) for i in range(12)])
        dirs.append(str(d))
    out = tmp_path / "gpu.yaml"
    argv = ["calibrate", *dirs[:4], "--validate", dirs[4], "--out", str(out), "--model", "llama-3.2-3b",
            "--kv-cache-tokens", "20000"]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    said, warned = capsys.readouterr()
    assert "warning" not in warned, warned
    gpu = load_gpu_profile(out)
    assert gpu.uncertainty.step_time_factor_90 != DEFAULT_STEP_TIME_FACTOR_90
    assert gpu.uncertainty.source.startswith("slabench calibrate") and "repeats' spread" in gpu.uncertainty.source
    report = json.loads((tmp_path / "gpu-intervals.json").read_text())
    assert [r["kind"] for r in report["runs"]] == ["fit"] * 4 + ["validate"]
    assert report["held_out"]["figures"] == 3 and "held-out:" in said.replace("\n", " ")
    widest = max(
        f["high"] / f["predicted"] for r in report["runs"] for m, f in r["figures"].items() if m == "throughput_rps"
    )
    assert gpu.uncertainty.step_time_factor_90 == pytest.approx(widest, rel=1e-3)
    # the levels it saw (every run two users): the factor holds there and widens beyond
    assert gpu.uncertainty.levels == (2.0, 2.0) and report["levels_seen"] == [2.0, 2.0]
    assert "widening beyond" in said.replace("\n", " ")


def test_a_fit_its_runs_barely_pin_warns_and_states_the_widest_factor(tmp_path, capsys):
    """Two runs: six figures for five coefficients leave one degree of freedom (t = 6.31) — no useful interval.
    calibrate says so and the profile states the schema's widest factor, ×10, not an overflow."""
    from slabench.commands.cli import main
    from slabench.sim.profiles import load_gpu_profile

    dirs = []
    for k, (gap, prompt) in enumerate(((0.3, 400), (0.2, 900))):
        d = tmp_path / f"run{k}"
        d.mkdir()
        write(d, [record(i, sent=gap * i, prompt=prompt + 7 * i) for i in range(12)])
        dirs.append(str(d))
    out = tmp_path / "gpu.yaml"
    argv = ["calibrate", *dirs, "--out", str(out), "--model", "llama-3.2-3b", "--kv-cache-tokens", "20000"]
    assert main(argv) == 0
    warned = capsys.readouterr().err
    assert "pins the step time only within" in warned and "1 degree(s) of freedom" in warned, warned
    assert load_gpu_profile(out).uncertainty.step_time_factor_90 == 10.0
