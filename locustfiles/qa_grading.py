"""The retail QA-grading workload: each user grades golden call transcripts against their account's rubric
(closed loop, accounts weighted by their share of the queue), and every record carries the answer's quality.

    locust -f locustfiles/qa_grading.py --headless -u 8 -t 60s          # embedded simulator, grading mode
    locust -f locustfiles/qa_grading.py --host http://vllm:8000 --qa-task verbose
    locust -f locustfiles/qa_grading.py,shapes/burst.py --headless      # the 20k/195 s burst queue, open loop

Closed loop it grades the golden calls; under an open-loop shape it grades the call each scheduled item names (the
dataset's burst or gamma queue, a queue file with account and seed columns), rebuilt from its seed ahead of its due
time; an item that names no call (rate and diurnal arrivals, a queue file of offsets) gets a golden call drawn by
its index, so every worker draws the same one.

The request names its call in the OpenAI `user` field, which real servers ignore and the simulator's grading mode
uses to answer at a set accuracy (`--sim-grading-accuracy`).

With `--qa-resize on`, transcripts are sized in the served model's tokens (`slabench.workload.sizing`): with
`--tokenizer DIR` measured on the golden transcripts, else learned from the server's usage as it answers (a no-op
against the simulator).
"""

import logging
import random

from locust import events, task
from locust.runners import WorkerRunner

from slabench.core.errors import UserError
from slabench.locust.distributed import fail_at_start
from slabench.locust.openloop import current_item, current_prepared
from slabench.locust.plugin import LLMUser, install
from slabench.sim.grading import user_tag
from slabench.workload import (
    build_messages,
    item_ref,
    load_golden,
    load_settings,
    prompt_tokens,
    score_answer,
)
from slabench.workload.sizing import AsBuilt, TokenizerScale, UsageScale

install()
log = logging.getLogger("slabench")


@events.init_command_line_parser.add_listener
def _options(parser):
    g = parser.add_argument_group("QA grading")
    g.add_argument(
        "--qa-task",
        choices=["verbose", "terse"],
        default="terse",
        help="terse (default, the example contract's task): {id, score} per item; verbose: quote + rationale per item",
    )
    g.add_argument("--qa-max-tokens", type=int, default=0, help="max_tokens (default: the workload's, 2048)")
    g.add_argument("--dataset-dir", default="datasets", help="the retail dataset (golden calls, queues, manifest)")
    g.add_argument(
        "--qa-resize",
        choices=["off", "on"],
        default="off",
        help="on: resize transcripts to their length in the served model's tokens (measured with --tokenizer, else "
        "learned from the server's usage); off: send the dataset's calls as they are",
    )


@events.init.add_listener
def _sizing(environment, **_):
    """A bad --tokenizer is one line and exit 3 at start, before any request."""
    if environment.parsed_options is None:
        return
    try:
        token_scale(environment)
    except UserError as e:
        fail_at_start(environment, e)


@events.init.add_listener
def _check_dataset(environment, runner, **_):
    """The golden calls are read once per process; on the master or local runner at start, so a bad --dataset-dir is
    one line (exit 3) before any load, not an error in every user."""
    if runner is None or isinstance(runner, WorkerRunner) or environment.parsed_options is None:
        return
    try:
        golden_calls(environment)
    except UserError as e:
        fail_at_start(environment, UserError(f"--dataset-dir {environment.parsed_options.dataset_dir}: {e}"))


@events.test_stop.add_listener
def _report_sizing(environment, **_):
    """The scale the calls were sized at, so a run says what its prompts were (and a learned one can be checked)."""
    scale = getattr(environment, "qa_token_scale", None)
    if scale is not None and not isinstance(scale, AsBuilt):
        log.info(
            "slabench: QA transcripts sized at %.4f model tokens per estimator token (%s)", scale.value, scale.source
        )


def golden_calls(environment) -> "GoldenCalls":
    if getattr(environment, "qa_golden", None) is None:  # once per process
        environment.qa_golden = GoldenCalls(environment.parsed_options.dataset_dir)
    return environment.qa_golden


class GoldenCalls:
    """The golden calls grouped by account, drawn with the accounts' queue shares as weights."""

    def __init__(self, dataset_dir: str) -> None:
        settings = load_settings()
        by_account: dict[str, list] = {}
        for item in load_golden(dataset_dir, settings):
            by_account.setdefault(item.account, []).append(item)
        self.accounts = sorted(by_account)
        self.weights = [settings.account(a).share for a in self.accounts]
        self.by_account = by_account
        self.max_tokens = settings.output.max_tokens

    def draw(self, rng: random.Random):
        account = rng.choices(self.accounts, self.weights)[0]
        return rng.choice(self.by_account[account])


class QAGradingUser(LLMUser):
    def on_start(self) -> None:
        super().on_start()
        o = self.environment.parsed_options
        self.golden: GoldenCalls = golden_calls(self.environment)
        self.task_name = o.qa_task
        self.max_tokens = o.qa_max_tokens or self.golden.max_tokens
        self.scale = token_scale(self.environment)

    @classmethod
    def check_items(cls, items):
        """Open loop, before any load: an item names a call by its account and seed, both known, or names none."""
        settings = load_settings()
        for item in items:
            if (item.account is None) != (item.seed is None):
                raise UserError(
                    f"queue item {item.item_id}: a QA-grading call is named by its account and its seed — give both "
                    "columns, or neither (then a golden call is drawn)"
                )
            if item.account is not None:
                settings.account(item.account, where=f"queue item {item.item_id}: account")

    @classmethod
    def prepare_item(cls, item, environment):
        """Open loop: build the item's call and its prompt before it is due (the shape calls this)."""
        scale = token_scale(environment)
        if item.account is None:  # an arrival that names no call
            call = scale.build(golden_calls(environment).draw(random.Random(item.index)))
        else:
            call = scale.build(item)
        return call, build_messages(call, environment.parsed_options.qa_task)

    @task
    def grade(self) -> None:
        if current_item() is not None:
            item, messages = current_prepared()
        else:
            item = self.scale.build(self.golden.draw(self.rng))
            messages = build_messages(item, self.task_name)
        body = self.body(
            messages=messages,
            max_tokens=self.max_tokens,
            user=user_tag(self.task_name, item_ref(item)),
            temperature=0,
        )
        record = self.request(
            body,
            grade=lambda text: score_answer(text, item, self.task_name).record_fields(self.task_name),
            account=item.account,
            item_id=item.item_id,
        )
        if record is not None and record.token_source == "server" and record.prompt_tokens:
            estimate = prompt_tokens(item, self.task_name)
            self.scale.observe(estimate - item.transcript_tokens, item.transcript_tokens, record.prompt_tokens)


def token_scale(environment):
    """The process's one transcript scale (`slabench.workload.sizing`), made on first use."""
    scale = getattr(environment, "qa_token_scale", None)
    if scale is None:
        o = environment.parsed_options
        if getattr(o, "qa_resize", "off") == "off":
            scale = AsBuilt()
        elif getattr(o, "tokenizer", ""):
            from slabench.core.tokens import ChatTokenizer

            scale = TokenizerScale(ChatTokenizer(o.tokenizer), load_golden(o.dataset_dir))
        else:
            scale = UsageScale()
        environment.qa_token_scale = scale
    return scale
