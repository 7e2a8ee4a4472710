"""Synthetic prompts of the asked length as the *server* counts it: with the served model's tokenizer (exact), or
calibrated from the server's usage. The tokenizer here is built to be far from the project's estimator: a byte-level
BPE with only ~300 tokens splits every word into several."""

from __future__ import annotations

import random
import statistics
from pathlib import Path

import pytest

from slabench.core.errors import UserError
from slabench.core.prompts import _VOCAB, SyntheticPrompts, TokenizerSizer, UsageSizer, synthetic_text
from slabench.core.tokens import ChatTokenizer, estimate_tokens
from tests.helpers.tokenizer_helpers import build_coarse_tokenizer


@pytest.fixture(scope="module")
def coarse_tokenizer(tmp_path_factory) -> Path:
    return build_coarse_tokenizer(tmp_path_factory.mktemp("coarse"))


def test_the_tokenizer_counts_the_templated_request_like_the_server(coarse_tokenizer):
    tok = ChatTokenizer(coarse_tokenizer)
    assert tok.render([{"role": "user", "content": "hi"}]) == "<s><|user|>\nhi</s>\n<|assistant|>\n"
    empty = tok.count([{"role": "user", "content": ""}])
    assert empty == 7  # <s> <|user|> \n </s> \n <|assistant|> \n
    text = synthetic_text(100, random.Random(1))
    assert tok.count([{"role": "user", "content": text}]) == empty + tok.count_text(text)
    assert tok.count_text(text) > 2 * estimate_tokens(text)  # far from the estimator: the point of the test


@pytest.mark.parametrize("n", [32, 256, 1000])
def test_with_the_tokenizer_every_prompt_is_exactly_the_asked_length(coarse_tokenizer, n):
    tok = ChatTokenizer(coarse_tokenizer)
    prompts = SyntheticPrompts(n, TokenizerSizer(tok))
    rng = random.Random(n)
    for _ in range(5):
        p = prompts.next(rng)
        assert tok.count(p.messages) == n
        assert p.estimate_tokens == estimate_tokens(p.messages[0]["content"])


def test_without_it_the_server_usage_calibrates_the_length_within_2_percent(coarse_tokenizer):
    server = ChatTokenizer(coarse_tokenizer)  # stands in for the server's usage.prompt_tokens
    prompts = SyntheticPrompts(256, UsageSizer())
    rng = random.Random(3)
    counts = []
    for _ in range(40):
        p = prompts.next(rng)
        counted = server.count(p.messages)
        counts.append(counted)
        prompts.observe(p, counted)
    assert counts[0] > 1.5 * 256  # the first request goes out on the estimator alone: far off
    assert abs(statistics.median(counts[5:]) / 256 - 1) <= 0.02


def test_against_a_server_that_counts_like_the_estimator_nothing_changes():
    """The embedded simulator counts with the estimator: the sizes stay exactly N."""
    prompts = SyntheticPrompts(300, UsageSizer())
    rng = random.Random(4)
    for _ in range(5):
        p = prompts.next(rng)
        assert p.estimate_tokens == 300
        prompts.observe(p, p.estimate_tokens)


def test_a_folder_without_a_tokenizer_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match=r"--tokenizer .*: no tokenizer.json there"):
        ChatTokenizer(tmp_path)


def test_no_single_token_word_is_needed(coarse_tokenizer):
    """This tokenizer has no one-token vocabulary word: gaps are filled from letters and digits."""
    sizer = TokenizerSizer(ChatTokenizer(coarse_tokenizer))
    assert min(sizer._cost[w] for w in _VOCAB) > 1


def test_a_server_whose_count_ignores_the_prompt_does_not_grow_it_without_bound(caplog):
    """A proxy that reports a fixed usage (or truncates prompts) answers 64 whatever is sent: aiming by its ratio
    would double the prompt on every answer. The prompts stay within twice the asked length, and it is said once."""
    prompts = SyntheticPrompts(512, UsageSizer())
    rng = random.Random(5)
    sizes = []
    with caplog.at_level("WARNING", logger="slabench"):
        for _ in range(40):
            p = prompts.next(rng)
            assert p.estimate_tokens == estimate_tokens(p.messages[0]["content"])
            sizes.append(p.estimate_tokens)
            prompts.observe(p, 64)
    assert max(sizes) == 2 * 512
    warnings = [r.getMessage() for r in caplog.records if "does not follow the prompt's length" in r.getMessage()]
    assert len(warnings) == 1 and "--tokenizer" in warnings[0]
