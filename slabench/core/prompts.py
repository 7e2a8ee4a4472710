"""Prompt sources for the generic chat replay user: synthetic N-token prompts, or a JSONL file of chat requests.

Synthetic prompts are sized so that the *server* counts N prompt tokens (its `usage.prompt_tokens`, chat template
included), not the project's estimator:
- with the served model's tokenizer (`--tokenizer DIR`, `TokenizerSizer`): counted exactly, as the server counts;
- without it (`UsageSizer`): calibrated from the server's own counts: after each answered request, the ratio of its
  `prompt_tokens` to the estimator's count of what was sent; the next prompts aim at N ÷ the median ratio of the
  last ones. The first request goes out at N estimator tokens. The ratio is held at or above `MIN_RATIO`: no real
  tokenizer counts our vocabulary at half a token a word, so a lower one means the server's count does not follow
  the prompt (a fixed or truncated count); aiming by it would double the prompt on every answer, without bound.
Records keep the server's count: it is the truth, the target is only what was aimed at.
"""

from __future__ import annotations

import logging
import random
import statistics
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from slabench.core.boundary import loads
from slabench.core.errors import UserError
from slabench.core.files import read_text
from slabench.core.tokens import MIN_RATIO, ChatTokenizer

log = logging.getLogger("slabench")

_VOCAB = (
    "order refund return warranty exchange delivery package invoice receipt customer agent account store card "
    "payment shipping address status tracking policy item size colour price discount coupon loyalty points "
    "subscription cancel replace damaged missing late early manager supervisor transfer hold callback survey "
    "please thank you sorry help check confirm verify explain understand process request number date week day"
).split()


@dataclass(frozen=True, slots=True)
class Prompt:
    messages: list[dict[str, Any]]
    item_id: str | None = None
    max_tokens: int | None = None
    estimate_tokens: int | None = None  # synthetic: the estimator's count of the content sent


class PromptSource(Protocol):
    def next(self, rng: random.Random) -> Prompt: ...

    def observe(self, prompt: Prompt, server_prompt_tokens: int | None) -> None: ...


def synthetic_text(n_tokens: int, rng: random.Random) -> str:
    """Exactly `n_tokens` tokens by the project's estimator (`slabench.core.tokens`): every vocabulary word is one."""
    return " ".join(rng.choices(_VOCAB, k=n_tokens))


class PromptSizer(Protocol):
    def content(self, n_tokens: int, rng: random.Random) -> str:
        """A user message for which the server counts about `n_tokens` prompt tokens: one-token pieces (words,
        letters, digits) joined by single spaces, so the estimator's count is the number of pieces."""

    def observe(self, estimate_tokens: int, server_prompt_tokens: int) -> None:
        """The server counted `server_prompt_tokens` for a message of `estimate_tokens` estimator tokens."""


class UsageSizer:
    """Aims at N server tokens through the server's own counts (see the module doc). Shared by a process's users."""

    def __init__(self, window: int = 32) -> None:
        self._ratios: deque[float] = deque(maxlen=window)
        self._lock = threading.Lock()
        self._warned = False
        self.ratio = 1.0  # server tokens per estimator token: the median of the last answers, never below MIN_RATIO

    def content(self, n_tokens: int, rng: random.Random) -> str:
        return synthetic_text(max(1, round(n_tokens / self.ratio)), rng)

    def observe(self, estimate_tokens: int, server_prompt_tokens: int) -> None:
        if estimate_tokens <= 0 or server_prompt_tokens <= 0:
            return
        with self._lock:
            self._ratios.append(server_prompt_tokens / estimate_tokens)
            ratio = statistics.median(self._ratios)
            if ratio < MIN_RATIO and not self._warned:
                self._warned = True
                log.warning(
                    "slabench: the server counts %.2f prompt tokens per word sent: its usage.prompt_tokens does not "
                    "follow the prompt's length (a fixed or truncated count?); prompts stay at %d%% of the asked "
                    "length instead of growing without bound (--tokenizer DIR sizes them exactly)",
                    ratio,
                    100 / MIN_RATIO,
                )
            self.ratio = max(ratio, MIN_RATIO)


TOKENIZER_CHECK_AFTER = 8  # answers before the tokenizer's counts are judged against the server's
TOKENIZER_TOLERANCE = 0.2  # the server's count may differ this much (a system prompt or tokens of its own)


class TokenizerSizer:
    """N server tokens, counted with the served model's tokenizer and chat template (`ChatTokenizer`): words until
    the count is reached, then the last few swapped for pieces (words, letters, digits) whose costs fill the gap
    exactly. Space-separated pieces cost what they cost alone (the tokenizer splits at spaces first), and every
    result is counted again."""

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self.tokenizer = tokenizer
        self._asked = 0  # the length the last prompt was sized to
        self._ratios: deque[float] = deque(maxlen=32)  # the server's count / the asked length, last answers
        self._lock = threading.Lock()
        self._warned = False
        self.overhead = tokenizer.count([{"role": "user", "content": ""}])  # the template around the message
        self._cost = {w: tokenizer.count_text(" " + w) for w in _VOCAB}  # a piece keeps its leading space
        pieces = list(_VOCAB) + list("abcdefghijklmnopqrstuvwxyz0123456789")
        self._by_cost: dict[int, list[str]] = {}
        for w in pieces:
            self._by_cost.setdefault(tokenizer.count_text(" " + w), []).append(w)

    def content(self, n_tokens: int, rng: random.Random) -> str:
        self._asked = n_tokens
        target = max(1, n_tokens - self.overhead)
        words: list[str] = []
        total = 0
        while total < target:
            w = rng.choice(_VOCAB)
            words.append(w)
            total += self._cost[w]
        count = self._count(words)
        for _ in range(8):  # a few rounds of: drop words until at or below the target, then fill the gap exactly
            if count == target:
                break
            while count > target and len(words) > 1:
                words.pop()
                count = self._count(words)
            words += self._fill(target - count, rng)
            count = self._count(words)
        return " ".join(words)

    def _fill(self, gap: int, rng: random.Random) -> list[str]:
        """Pieces whose costs sum to `gap` (fewest pieces; none if no combination does)."""
        if gap <= 0:
            return []
        best: list[list[int] | None] = [[]] + [None] * gap  # best[g]: costs summing to g
        for g in range(1, gap + 1):
            for c in self._by_cost:
                shorter, current = best[g - c] if c <= g else None, best[g]
                if shorter is not None and (current is None or len(shorter) + 1 < len(current)):
                    best[g] = [*shorter, c]
        return [rng.choice(self._by_cost[c]) for c in best[gap] or []]

    def _count(self, words: list[str]) -> int:
        return self.tokenizer.count_text(" ".join(words))

    def observe(self, estimate_tokens: int, server_prompt_tokens: int) -> None:
        """Nothing to learn when the tokenizer is the server's; said once when it is not (another model's folder:
        every prompt would go out at another length than asked, silently)."""
        if server_prompt_tokens <= 0 or self._asked <= 0:
            return
        with self._lock:
            self._ratios.append(server_prompt_tokens / self._asked)
            if self._warned or len(self._ratios) < TOKENIZER_CHECK_AFTER:
                return
            ratio = statistics.median(self._ratios)
            if abs(ratio - 1) > TOKENIZER_TOLERANCE:
                self._warned = True
                log.warning(
                    "slabench: --tokenizer %s does not count as the server does: prompts sized to %d tokens were "
                    "counted %.0f by the server (median of its last %d answers' usage.prompt_tokens): every prompt is "
                    "%.0f%% of the asked length — pass the served model's folder, or drop --tokenizer (the server's "
                    "usage then sizes prompts)",
                    getattr(self.tokenizer, "folder", "?"),
                    self._asked,
                    ratio * self._asked,
                    len(self._ratios),
                    100 * ratio,
                )


@dataclass(frozen=True)
class SyntheticPrompts:
    prompt_tokens: int = 512
    sizer: PromptSizer | None = None  # None: the estimator's count (what the embedded simulator counts)

    def next(self, rng: random.Random) -> Prompt:
        text = self._text(self.prompt_tokens, rng)
        # Every piece a sizer uses (a vocabulary word, letter or digit) is one estimator token: count the spaces.
        return Prompt([{"role": "user", "content": text}], estimate_tokens=text.count(" ") + 1 if text else 0)

    def for_item(
        self, prompt_tokens: int, output_tokens: int, blocks: tuple[int, ...], block_tokens: int, rng: random.Random
    ) -> Prompt:
        """A trace's request: `prompt_tokens` as the server counts them, at most `output_tokens` back. Its shared
        blocks (`blocks`, each `block_tokens` long) go first as a system message whose text is the same wherever the
        block is (seeded by the block's id), so a server's prefix cache sees what the trace's service saw; the rest
        is the request's own user message."""
        shared = [self._text(block_tokens, random.Random(f"slabench-block-{b}"), overhead=True) for b in blocks]
        own = self._text(max(1, prompt_tokens - block_tokens * len(blocks)), rng)
        messages = [{"role": "system", "content": " ".join(shared)}] if shared else []
        messages.append({"role": "user", "content": own})
        pieces = sum(m["content"].count(" ") + 1 for m in messages)
        return Prompt(messages, max_tokens=output_tokens, estimate_tokens=pieces)

    def _text(self, n_tokens: int, rng: random.Random, overhead: bool = False) -> str:
        """`n_tokens` of text; `overhead`: a block inside a longer prompt, which carries no chat template of its own
        (a tokenizer-sized message counts the template: ask for that much more)."""
        if self.sizer is None:
            return synthetic_text(n_tokens, rng)
        extra = getattr(self.sizer, "overhead", 0) if overhead else 0
        return self.sizer.content(n_tokens + extra, rng)

    def observe(self, prompt: Prompt, server_prompt_tokens: int | None) -> None:
        """Feed the server's count of an answered prompt back to the sizer."""
        if self.sizer is not None and server_prompt_tokens and prompt.estimate_tokens:
            self.sizer.observe(prompt.estimate_tokens, server_prompt_tokens)


class FilePrompts:
    """Replays a JSONL file, a line per request: ``{"messages": [...], "id": "...", "max_tokens": N}``
    (id and max_tokens optional)."""

    def __init__(self, path: str | Path) -> None:
        self.prompts: list[Prompt] = []
        p = Path(path)
        try:
            lines = read_text(p).splitlines()
        except UserError as e:
            raise UserError(f"--prompts {e}") from None
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = loads(line)  # NaN and Infinity refused
                messages = row["messages"]
                if not isinstance(messages, list) or not all(isinstance(m, dict) and "content" in m for m in messages):
                    raise ValueError("`messages` must be a list of {role, content} objects")
                limit = row.get("max_tokens")
                if limit is not None and (type(limit) is not int or limit < 1):
                    raise ValueError(f"max_tokens is {limit!r}; it is a positive integer")
            except (ValueError, KeyError, TypeError) as e:
                raise UserError(f'{p}:{n}: {e}; expected {{"messages": [{{"role": ..., "content": ...}}]}}') from None
            self.prompts.append(Prompt(messages, str(row.get("id", n)), row.get("max_tokens")))
        if not self.prompts:
            raise UserError(f"--prompts {p}: the file has no prompts")

    def next(self, rng: random.Random) -> Prompt:
        return rng.choice(self.prompts)

    def observe(self, prompt: Prompt, server_prompt_tokens: int | None) -> None:
        pass  # a file's prompts are what they are
