"""The workload's calls sized in the served model's tokens, so a transcript's length target lands on the server.

A call's transcript aims at `length_target` tokens (minutes × the account's tokens per minute): in the estimator's
tokens when the dataset is built. Against a real model, `build_item(item, token_scale=s)` rebuilds the call (scores
and evidence unchanged, neutral talk resized) so its transcript is the target in the model's tokens, where s is the
model's tokens per estimator token on this text:

- `TokenizerScale`: measured with the served model's tokenizer on golden transcripts (`--tokenizer DIR`);
- `UsageScale`: learned from the server's `usage.prompt_tokens` as requests are answered (a least-squares fit of its
  count against the estimator's counts of the prompt's fixed part and of its transcript); 1.0 until enough came
  back, and exactly 1.0 against a server that counts like the estimator (the embedded simulator), so nothing is
  rebuilt there. Never below `MIN_RATIO` (0.5): a server whose count ignores the prompt would otherwise have the
  calls rebuilt ever longer (the transcript aims at target ÷ scale).

A rebuilt call draws its neutral filler and answer lengths afresh (the same distributions); its ground truth is the
original's.

Resized for a model that spends more tokens per word, calls are written compactly (an agent who speaks twice in a
row keeps talking, no backchannel between; each line from the shorter half of its phrasings) and stop short of a last
filler that would overshoot by more than it fills. Limit: a call cannot be shorter than the lines its scored
behaviour needs, so with a tokenizer that spends many tokens per word the short calls stay over their target.
Median (server count ÷ the call's stated length, fixed part included) over the golden calls with the live tier's
tiny tokenizer (1.5 tokens per estimator token): +12 % as built, +1.0 % resized with the tokenizer, +1.5 % at the
scale learned from vLLM's usage; with a 300-token BPE (2.9), +12 % (docs/plan.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from slabench.core.tokens import MIN_RATIO, ChatTokenizer

if TYPE_CHECKING:
    from slabench.workload.dataset import NamesACall
    from slabench.workload.transcripts import GradingItem

log = logging.getLogger("slabench")

SAME = 0.005  # a scale this close to 1 is 1: the call is not rebuilt


class TokenizerScale:
    """Tokens of the served model per estimator token, on a sample of the golden transcripts."""

    def __init__(self, tokenizer: ChatTokenizer, golden: Sequence[GradingItem], sample: int = 60) -> None:
        picked = golden[:: max(1, len(golden) // sample)][:sample]
        model = sum(tokenizer.count_text(g.transcript) for g in picked)
        estimate = sum(g.transcript_tokens for g in picked)
        ratio = model / estimate if estimate else 1.0
        self.tokenizer = tokenizer
        self.value = 1.0 if abs(ratio - 1.0) < SAME else ratio
        self.source = f"measured with the tokenizer on {len(picked)} golden transcripts"

    def build(self, item: NamesACall) -> GradingItem:
        """The call with its transcript at the measured scale."""
        from slabench.workload import build_item

        return build_item(item, token_scale=self.value)

    def observe(self, fixed_estimate: int, transcript_estimate: int, server_prompt_tokens: int) -> None:
        pass  # the tokenizer is the server's


class UsageScale:
    """Learned from the server's counts: over the last `window` answered prompts, a least-squares fit of its
    `prompt_tokens` = template + a × (the prompt's fixed part, by the estimator) + s × (its transcript, by the
    estimator); s is the scale. The fixed part (system prompt, user prefix) is its own term: it is other text than
    a transcript, and its size moves with the account, not with the call."""

    def __init__(self, window: int = 64, minimum: int = 6) -> None:
        self._rows: list[tuple[int, int, int]] = []
        self._window, self._minimum = window, minimum
        self._lock = threading.Lock()
        self._warned = False
        self.answers = 0
        self.value = 1.0

    @property
    def source(self) -> str:
        return f"learned from the server's usage in {self.answers} answers"

    def observe(self, fixed_estimate: int, transcript_estimate: int, server_prompt_tokens: int) -> None:
        if transcript_estimate <= 0 or server_prompt_tokens <= 0:
            return
        with self._lock:
            self.answers += 1
            self._rows = [*self._rows, (fixed_estimate, transcript_estimate, server_prompt_tokens)][-self._window :]
            if len(self._rows) < self._minimum:
                return
            a = np.array([[1.0, f, t] for f, t, _ in self._rows])
            y = np.array([s for _, _, s in self._rows], float)
            if np.linalg.matrix_rank(a) == 3:
                slope = float(np.linalg.lstsq(a, y, rcond=None)[0][2])
            else:  # no spread to tell the parts apart: the overall ratio
                slope = float(y.sum() / a[:, 1:].sum())
            if slope < MIN_RATIO and not self._warned:
                self._warned = True
                log.warning(
                    "slabench: the server's usage.prompt_tokens does not follow the transcripts' length (fitted "
                    "%.2f tokens per word: a fixed or truncated count?); calls are resized at %.1f at most "
                    "(--tokenizer DIR sizes them exactly)",
                    slope,
                    MIN_RATIO,
                )
            self.value = 1.0 if abs(slope - 1.0) < SAME else max(slope, MIN_RATIO)

    def build(self, item: NamesACall) -> GradingItem:
        """The call with its transcript at the learned scale."""
        from slabench.workload import build_item

        return build_item(item, token_scale=self.value)


class AsBuilt:
    """No resizing: the dataset's calls as they are."""

    value = 1.0

    def build(self, item: NamesACall) -> GradingItem:
        from slabench.workload import build_item

        return build_item(item)

    def observe(self, fixed_estimate: int, transcript_estimate: int, server_prompt_tokens: int) -> None:
        pass
