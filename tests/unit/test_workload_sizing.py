"""The workload's transcripts sized in the served model's tokens, with the model's tokenizer or learned from the
server's usage. With a tokenizer near a real model's (~1.2 tokens per estimator token) the median prompt lands within
±2 % of its stated length. A coarse one splits every word into several tokens (~2.9): only the neutral talk can be
resized, so most calls stay over their length there (sizing.py's limit) and the median error must only shrink."""

from __future__ import annotations

import statistics

import pytest

from slabench.core.tokens import ChatTokenizer
from slabench.workload import QueueItem, build_item, build_messages, load_golden, load_queue
from slabench.workload import prompt_tokens as estimated_prompt
from slabench.workload.sizing import TokenizerScale, UsageScale
from tests.helpers.tokenizer_helpers import build_coarse_tokenizer, build_transcript_tokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory) -> ChatTokenizer:
    return ChatTokenizer(build_coarse_tokenizer(tmp_path_factory.mktemp("coarse")))


@pytest.fixture(scope="module")
def queue() -> list[QueueItem]:
    return load_queue("datasets", "burst")[:5000:250]  # 20 calls across the queue


def _without_transcript(call):
    import dataclasses

    return dataclasses.replace(call, transcript="")


def ratios(tok, built, sized) -> list[float]:
    """Server count ÷ the call's stated length: the prompt's fixed part (template, system prompt, user prefix) as
    the server counts it + the transcript length the dataset states."""
    out = []
    for b, z in zip(built, sized, strict=True):
        fixed = tok.count(build_messages(_without_transcript(b), "verbose"))
        out.append(tok.count(build_messages(z, "verbose")) / (fixed + b.transcript_tokens))
    return out


def median_error(values: list[float]) -> float:
    return abs(statistics.median(values) - 1)


def test_with_the_tokenizer_the_lengths_come_closer(tok, queue):
    built = [build_item(q) for q in queue]
    as_built = ratios(tok, built, built)
    assert median_error(as_built) > 0.2  # the estimator's sizes, counted by this tokenizer: far off
    scale = TokenizerScale(tok, load_golden("datasets"))
    assert scale.value > 2
    sized = ratios(tok, built, [scale.build(q) for q in queue])
    assert median_error(sized) < median_error(as_built) - 0.05, (as_built, sized)


def test_with_a_tokenizer_near_a_real_models_the_median_prompt_is_its_stated_length(tmp_path):
    """100 calls across the burst queue. Before resizing they come out +1.8 % at the median (the estimator counts
    these transcripts ~1.2× short); resized, +0.7 %. Resized calls join an agent's two turns in a row instead of
    putting a backchannel between them, draw each line from its shorter phrasings, and stop short of a filler that
    would overshoot by more than it fills."""
    real = ChatTokenizer(build_transcript_tokenizer(tmp_path))
    sample = load_queue("datasets", "burst")[::200]
    built = [build_item(q) for q in sample]
    scale = TokenizerScale(real, load_golden("datasets"))
    assert 1.1 < scale.value < 1.35
    sized = ratios(real, built, [scale.build(q) for q in sample])
    assert median_error(sized) <= 0.02, statistics.median(sized)
    assert median_error(sized) < median_error(ratios(real, built, built))


def test_from_usage_the_scale_is_learned_like_the_tokenizers(tok, queue):
    """The server (here: the tokenizer) answers the dataset's calls; its counts against the estimator's parts give
    nearly the tokenizer's own scale."""
    scale = UsageScale()
    for call in load_golden("datasets")[::20]:  # 13 calls, every account
        fixed = estimated_prompt(call, "verbose") - call.transcript_tokens
        scale.observe(fixed, call.transcript_tokens, tok.count(build_messages(call, "verbose")))
    assert scale.value == pytest.approx(TokenizerScale(tok, load_golden("datasets")).value, rel=0.1)


def test_against_a_server_counting_like_the_estimator_nothing_is_rebuilt():
    scale = UsageScale()
    golden = load_golden("datasets")[:8]
    for call in golden:
        estimate = estimated_prompt(call, "verbose")
        scale.observe(estimate - call.transcript_tokens, call.transcript_tokens, estimate)
    assert scale.value == 1.0
    assert scale.build(golden[0]) is golden[0]


@pytest.mark.parametrize("token_scale", [0.5, 1.5])
def test_a_resized_call_keeps_its_ground_truth_and_evidence(queue, token_scale):
    """0.5: a model with half as many tokens, so twice the estimator's words. 1.5: a coarser one, so the call is
    written compactly (shorter phrasings, no backchannel between an agent's turns): shorter, the same behaviour."""
    for q in queue:
        call, resized = build_item(q), build_item(q, token_scale=token_scale)
        assert (resized.scores, resized.autofail, resized.passed) == (call.scores, call.autofail, call.passed)
        assert {i for i, _ in resized.evidence} == {i for i, _ in call.evidence}
        assert resized.transcript != call.transcript
    ratio = sum(build_item(q, token_scale=token_scale).transcript_tokens for q in queue) / sum(
        build_item(q).transcript_tokens for q in queue
    )
    assert ratio > 1.6 if token_scale < 1 else ratio < 0.8


def test_a_server_whose_count_ignores_the_prompt_does_not_stretch_the_calls(caplog):
    """A fixed usage (a proxy, or a truncating server) fits a scale near 0; the calls aim at target ÷ scale, so they
    would be rebuilt tens of times longer. The scale stops at 0.5 — twice the estimator's length at most — said once."""
    scale = UsageScale()
    golden = load_golden("datasets")[:12]
    with caplog.at_level("WARNING", logger="slabench"):
        for call in golden:
            fixed = estimated_prompt(call, "verbose") - call.transcript_tokens
            scale.observe(fixed, call.transcript_tokens, 700)
    assert scale.value == 0.5
    assert sum("does not follow the transcripts' length" in r.getMessage() for r in caplog.records) == 1
