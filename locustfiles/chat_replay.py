"""Generic chat replay: each user sends chat requests back to back (closed loop).

    locust -f locustfiles/chat_replay.py --headless -u 8 -t 30s          # embedded simulator
    locust -f locustfiles/chat_replay.py --host http://127.0.0.1:8000 --prompts prompts.jsonl

Prompts: synthetic ones of --prompt-tokens tokens as the server counts them (exactly with --tokenizer DIR, the
served model's folder; else calibrated from the server's usage as it answers), or a JSONL file given with --prompts.
Under shapes/burst.py with a trace (--burst-queue mooncake.jsonl, docs/shapes.md), each request has the trace's
prompt and output lengths and its shared prefix blocks (synthetic prompts only; a --prompts file keeps its own).
"""

import random

from locust import events, task

from slabench.core.errors import UserError
from slabench.core.prompts import FilePrompts, SyntheticPrompts, TokenizerSizer, UsageSizer
from slabench.locust.distributed import fail_at_start
from slabench.locust.openloop import current_item
from slabench.locust.plugin import LLMUser, install

install()


def prompt_source(environment):
    """The process's one prompt source (its users share the length calibration), made on first use."""
    source = getattr(environment, "chat_prompts", None)
    if source is None:
        o = environment.parsed_options
        if o.prompts:
            source = FilePrompts(o.prompts)
        elif getattr(o, "tokenizer", ""):
            from slabench.core.tokens import ChatTokenizer

            source = SyntheticPrompts(o.prompt_tokens, TokenizerSizer(ChatTokenizer(o.tokenizer)))
        else:
            source = SyntheticPrompts(o.prompt_tokens, UsageSizer())
        environment.chat_prompts = source
    return source


@events.init.add_listener
def _prompts(environment, **_):
    """A bad --prompts or --tokenizer is one line and exit 3 at start, before any request."""
    if environment.parsed_options is None:
        return
    try:
        prompt_source(environment)
    except UserError as e:
        fail_at_start(environment, e)


class ChatReplayUser(LLMUser):
    def on_start(self) -> None:
        super().on_start()
        self.prompts = prompt_source(self.environment)

    @task
    def chat(self) -> None:
        item = current_item()
        if item is not None and item.prompt_tokens is not None and isinstance(self.prompts, SyntheticPrompts):
            # a trace's request: its own lengths, its shared blocks first
            block = int(getattr(self.environment.parsed_options, "queue_block_tokens", 512) or 512)
            prompt = self.prompts.for_item(
                item.prompt_tokens, item.output_tokens or 1, item.prefix_blocks, block, random.Random(item.index)
            )
        else:
            prompt = self.prompts.next(self.rng)
        record = self.request(self.body(messages=prompt.messages, max_tokens=prompt.max_tokens), item_id=prompt.item_id)
        if record is not None and record.token_source == "server":
            self.prompts.observe(prompt, record.prompt_tokens)
