"""Does every request of the run fit the server's context? Checked before any GPU starts.

vLLM refuses a request whose prompt + `max_tokens` exceeds `--max-model-len` (HTTP 400), and the run counts it as an
error: a context too short for the workload makes a run FAIL because of a setting. So `slabench deploy` compares the
release's `model.maxModelLen` with the QA-grading workload's longest request — the longest prompt among the calls
the run sends (the burst queue's and the golden calls) plus the workload's `max_tokens` — and refuses in one line.

Counted in the model's tokens with `--tokenizer DIR` (the model's folder: its tokenizer and chat template): the
longest calls by the estimator are rendered and counted exactly. Without it the count is the estimator's, which the
simulator uses and a real tokenizer usually exceeds by 10-30 %, so the log says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from slabench.core.errors import UserError
from slabench.deploy.plan import DeployPlan, Values
from slabench.workload.prompts import TASKS, Task

if TYPE_CHECKING:
    from slabench.core.tokens import ChatTokenizer
    from slabench.workload import GradingItem, QueueItem

QA_LOCUSTFILE = "locustfiles/qa_grading.py"
EXACT_COUNTED = 24  # the longest calls by the estimator that are counted with the tokenizer


@dataclass(frozen=True)
class Longest:
    prompt_tokens: int
    max_tokens: int
    call: str  # which call, for the message
    unit: str  # "the model's tokens" or "estimator tokens"

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.max_tokens


def _queue_candidates(dataset_dir: str, task: Task, k: int) -> list[tuple[int, QueueItem]]:
    """The k longest burst-queue calls by the estimator: (estimated prompt tokens, the queue item)."""
    import numpy as np

    from slabench.plan.workload import dataset_load
    from slabench.workload import load_queue

    mix = dataset_load(dataset_dir, "burst", task).mix  # cached per queue and settings (the planner's)
    queue = load_queue(dataset_dir, "burst")
    top = np.argsort(mix.prompt_tokens)[::-1][:k]
    return [(int(mix.prompt_tokens[i]), queue[int(i)]) for i in top]


def longest_request(
    dataset_dir: str, task: Task, tokenizer: ChatTokenizer | None = None, max_tokens: int | None = None
) -> Longest:
    """The workload's longest request (prompt + max_tokens), in the model's tokens when `tokenizer` is given."""
    from slabench.workload import build_item, build_messages, load_golden, load_settings, prompt_tokens

    settings = load_settings()
    golden = [(prompt_tokens(g, task), g) for g in load_golden(dataset_dir)]
    golden.sort(key=lambda x: -x[0])
    k = EXACT_COUNTED if tokenizer is not None else 1
    candidates: list[tuple[int, GradingItem | QueueItem, str]] = [
        (n, g, f"golden call {g.item_id}") for n, g in golden[:k]
    ]
    candidates += [(n, q, f"burst queue item {q.index}") for n, q in _queue_candidates(dataset_dir, task, k)]
    if tokenizer is None:
        n, _, name = max(candidates, key=lambda c: c[0])
        unit = "estimator tokens"
    else:
        counted = [(tokenizer.count(build_messages(build_item(it), task)), it, name) for _, it, name in candidates]
        n, _, name = max(counted, key=lambda c: c[0])
        unit = "the model's tokens"
    return Longest(n, max_tokens or settings.output.max_tokens, f"{name} ({task} task)", unit)


def _flag_value(args: list[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return str(args[i + 1])
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def check_context(max_model_len: int, longest: Longest, where: str) -> None:
    if max_model_len < longest.total:
        raise UserError(
            f"{where}: maxModelLen {max_model_len} is shorter than the workload's longest request, "
            f"{longest.prompt_tokens} prompt + {longest.max_tokens} max_tokens = {longest.total} {longest.unit} "
            f"({longest.call}) — vLLM would refuse it; set model.maxModelLen to at least {longest.total} in a "
            "--serving-values file"
        )


def _task(args: list[str]) -> Task:
    task = _flag_value(args, "--qa-task") or "verbose"
    for known in TASKS:
        if task == known:
            return known
    raise UserError(
        f"--qa-task {task!r} in the Locust values' extraArgs: unknown grading task (use one of: {', '.join(TASKS)})"
    )


def check_plan_context(
    plan: DeployPlan, serving: Values, locust: Values, tokenizer_dir: Path | None, log: TextIO
) -> None:
    """`slabench deploy`'s check: the serving values' maxModelLen against the run's longest QA-grading request."""
    locustfile = str(locust.get("locustfile") or QA_LOCUSTFILE)
    if plan.kind == "sweep" and plan.sweep is not None:
        from slabench.core import yamlio

        sweep = yamlio.load_data(plan.sweep)
        locustfile = str((sweep or {}).get("locustfile") or QA_LOCUSTFILE) if isinstance(sweep, dict) else locustfile
    if QA_LOCUSTFILE not in locustfile.split(","):
        print(f"deploy: context check skipped: {locustfile} is not the QA-grading workload", file=log)
        return
    args = [*(locust.get("extraArgs") or []), *((locust.get("headless") or {}).get("extraArgs") or [])]
    task = _task(args)
    max_tokens = _flag_value(args, "--qa-max-tokens")
    tokenizer = None
    if tokenizer_dir is not None:
        from slabench.core.tokens import ChatTokenizer

        tokenizer = ChatTokenizer(tokenizer_dir)
    dataset = str(plan.charts_dir.parent / "datasets")
    longest = longest_request(dataset, task, tokenizer, int(max_tokens) if max_tokens else None)
    max_model_len = int((serving.get("model") or {}).get("maxModelLen") or 0)
    files = ", ".join(str(f) for f in plan.serving_values_files)
    where = f"--serving-values {files}" if files else f"{plan.serving_chart / 'values.yaml'} (the chart's default)"
    check_context(max_model_len, longest, where)
    print(
        f"deploy: context: maxModelLen {max_model_len} ≥ the longest request, {longest.total} {longest.unit} "
        f"({longest.call})" + ("" if tokenizer else "; --tokenizer DIR counts it in the model's own tokens"),
        file=log,
    )
