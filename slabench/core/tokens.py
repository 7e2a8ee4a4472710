"""The one client-side token estimator (used when a server gives no `usage`, by the simulator, and by the dataset
generator to target lengths).

Method: count words and punctuation marks (regex ``\\w+|[^\\w\\s]``). For English prose a BPE tokenizer such as
Llama-3's gives ~1.2–1.35 tokens per word; counting punctuation separately lands within ~15% of that. Estimates are
always flagged as estimates on records; the server's `usage` is the truth.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from slabench.core.errors import UserError
from slabench.core.extras import require
from slabench.core.files import read_text

if TYPE_CHECKING:
    from jinja2 import Template

_TOKEN = re.compile(r"\w+|[^\w\s]")
# The fewest server tokens per estimator token a calibration believes: no real tokenizer counts a word as half a
# token, so a lower ratio means the server's count does not follow the prompt (fixed or truncated), and sizing by
# it would grow prompts without bound.
MIN_RATIO = 0.5


def estimate_tokens(text: str) -> int:
    return len(_TOKEN.findall(text))


def split_tokens(text: str) -> list[str]:
    """Split text into estimator tokens, each keeping its leading whitespace, so ''.join() restores the text."""
    return re.findall(r"\s*(?:\w+|[^\w\s])", text) or ([text] if text else [])


class ChatTokenizer:
    """The served model's own tokenizer, from its folder (`tokenizer.json`, and the chat template from
    `tokenizer_config.json` or `chat_template.jinja`), to count a chat request's prompt as the server does: the
    messages rendered by the template (with the generation prompt), tokenized without adding special tokens again.
    Needs the `tokenizers` package (`pip install 'slabench[tokenizer]'`)."""

    def __init__(self, folder: str | Path) -> None:
        import json

        d = Path(folder)
        if not (d / "tokenizer.json").is_file():
            raise UserError(f"--tokenizer {d}: no tokenizer.json there — pass the model's folder (as served)")
        require("tokenizers", "--tokenizer")
        from tokenizers import Tokenizer

        config_file = d / "tokenizer_config.json"
        try:
            self._tok = Tokenizer.from_file(str(d / "tokenizer.json"))
            config = json.loads(read_text(config_file)) if config_file.exists() else {}
        except UserError as e:
            raise UserError(f"--tokenizer {d}: {e}") from None
        except Exception as e:  # tokenizers raises its own Exception subclass, json ValueError, files OSError
            raise UserError(f"--tokenizer {d}: cannot load it ({str(e)[:200]})") from None
        if not isinstance(config, dict):
            raise UserError(f"--tokenizer {config_file}: not a JSON object ({type(config).__name__}) — is it the "
                            "model's tokenizer_config.json?")  # fmt: skip
        template = config.get("chat_template")
        where = f"{config_file}: chat_template"
        if template is None and (d / "chat_template.jinja").is_file():
            template, where = read_text(d / "chat_template.jinja"), str(d / "chat_template.jinja")
        if template is not None and not isinstance(template, str):
            raise UserError(f"--tokenizer {where}: not one template string ({type(template).__name__}); give the "
                            "template the server uses as a string, or chat_template.jinja")  # fmt: skip
        self.folder = d
        self._special = {k: _token_text(config.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
        self._template = _compile(template, where) if template is not None else None
        try:  # a template that fails fails at start, once, not on every request
            self.render([{"role": "user", "content": "hello"}])
        except Exception as e:
            raise UserError(f"--tokenizer {where}: the chat template fails on one user message ({e})") from None

    def count_text(self, text: str) -> int:
        return len(self._tok.encode(text, add_special_tokens=False).ids)

    def render(self, messages: list[dict[str, Any]]) -> str:
        if self._template is None:
            return "".join(str(m.get("content") or "") for m in messages)
        return self._template.render(messages=messages, add_generation_prompt=True, **self._special)

    def count(self, messages: list[dict[str, Any]]) -> int:
        """Prompt tokens of a chat request, as a vLLM serving this model counts them."""
        return self.count_text(self.render(messages))


def _token_text(value: object) -> str:
    if isinstance(value, dict):  # {"content": "<s>", ...} in older configs
        return str(value.get("content", ""))
    return "" if value is None else str(value)


def _compile(template: str, where: str) -> Template:
    """As transformers renders chat templates: a sandboxed Jinja environment, trim_blocks and lstrip_blocks."""
    from jinja2.exceptions import TemplateError, TemplateSyntaxError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> NoReturn:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template)
    except TemplateSyntaxError as e:
        raise UserError(f"--tokenizer {where}: not a valid Jinja template (line {e.lineno}: {e.message})") from None
