"""Prompt sources for the generic chat replay user: synthetic N-token prompts, or a JSONL file of chat requests."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from slabench.errors import UserError
from slabench.files import read_text

_VOCAB = (
    "order refund return warranty exchange delivery package invoice receipt customer agent account store card "
    "payment shipping address status tracking policy item size colour price discount coupon loyalty points "
    "subscription cancel replace damaged missing late early manager supervisor transfer hold callback survey "
    "please thank you sorry help check confirm verify explain understand process request number date week day"
).split()


@dataclass(frozen=True, slots=True)
class Prompt:
    messages: list[dict]
    item_id: str | None = None
    max_tokens: int | None = None


class PromptSource(Protocol):
    def next(self, rng: random.Random) -> Prompt: ...


def synthetic_text(n_tokens: int, rng: random.Random) -> str:
    """Exactly `n_tokens` tokens by the project's estimator (`slabench.tokens`)."""
    return " ".join(rng.choice(_VOCAB) for _ in range(n_tokens))


@dataclass(frozen=True)
class SyntheticPrompts:
    prompt_tokens: int = 512

    def next(self, rng: random.Random) -> Prompt:
        return Prompt([{"role": "user", "content": synthetic_text(self.prompt_tokens, rng)}])


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
                row = json.loads(line)
                messages = row["messages"]
                if not isinstance(messages, list) or not all(isinstance(m, dict) and "content" in m for m in messages):
                    raise ValueError("`messages` must be a list of {role, content} objects")
            except (ValueError, KeyError, TypeError) as e:
                raise UserError(f'{p}:{n}: {e}; expected {{"messages": [{{"role": ..., "content": ...}}]}}') from None
            self.prompts.append(Prompt(messages, str(row.get("id", n)), row.get("max_tokens")))
        if not self.prompts:
            raise UserError(f"--prompts {p}: the file has no prompts")

    def next(self, rng: random.Random) -> Prompt:
        return rng.choice(self.prompts)


def prompt_source(environment: Any) -> PromptSource:
    """The run's prompts (--prompts FILE, else synthetic --prompt-tokens), read once per process: every user shares
    them, and a bad file is found once (at start on the master or local runner), not by every user."""
    opts = environment.parsed_options
    key = (opts.prompts, opts.prompt_tokens)
    cached = getattr(environment, "slabench_prompts", None)
    if cached is None or cached[0] != key:
        source = FilePrompts(opts.prompts) if opts.prompts else SyntheticPrompts(opts.prompt_tokens)
        environment.slabench_prompts = cached = (key, source)
    return cached[1]
