"""Generic chat replay: each user sends chat requests back to back (closed loop).

    locust -f locustfiles/chat_replay.py --headless -u 8 -t 30s          # embedded simulator
    locust -f locustfiles/chat_replay.py --host http://127.0.0.1:8000 --prompts prompts.jsonl

Prompts: synthetic ones of --prompt-tokens tokens, or a JSONL file given with --prompts.
"""

from locust import task

from slabench.locust_plugin import LLMUser, install
from slabench.prompts import prompt_source

install()


class ChatReplayUser(LLMUser):
    def on_start(self) -> None:
        super().on_start()
        self.prompts = prompt_source(self.environment)

    @task
    def chat(self) -> None:
        prompt = self.prompts.next(self.rng)
        self.request(self.body(messages=prompt.messages, max_tokens=prompt.max_tokens), item_id=prompt.item_id)
