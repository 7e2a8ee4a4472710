"""The retail QA-grading workload (docs/workload.md): synthetic calls with ground truth, the 20k burst queue, grading
prompts and answer quality.

What a load test uses::

    from slabench.workload import load_golden, load_queue, build_item, build_messages, score_answer

    queue = load_queue("datasets", kind="burst")      # QueueItem(index, offset_s, account, seed, kind)
    item = build_item(queue[0])                       # GradingItem: transcript + ground truth, rebuilt from the seed
    messages = build_messages(item, task="verbose")   # OpenAI chat messages; system prompt cached per account
    result = score_answer(answer_text, item, task="verbose")  # QualityResult; never raises for a bad answer
    record = record.replace(**result.record_fields("verbose"))

    # the simulator's grading mode: the request names its item, the simulator answers at a set accuracy
    ref = item_ref(item)                              # "burst-00000|B|5047044799433"
    answer = simulated_answer(item_from_ref(ref), accuracy=0.9, rng=random.Random(1), task="verbose")

All settings default to the packaged `assumptions.yaml` (`load_settings()`); every function takes `settings=` to
use another.
"""

from slabench.core.queue import QueueItem
from slabench.workload.accounts import WorkloadSettings, load_settings
from slabench.workload.dataset import (
    build_item,
    item_from_ref,
    item_ref,
    load_golden,
    load_queue,
    verify_dataset,
    write_dataset,
)
from slabench.workload.golden import GoldenCall
from slabench.workload.prompts import TASKS, Task, answer_schema, build_messages, prompt_tokens, system_prompt
from slabench.workload.quality import (
    AnswerError,
    QualityResult,
    QualitySummary,
    parse_answer,
    score_answer,
    simulated_answer,
    summarize_quality,
)
from slabench.workload.queue import QUEUE_KINDS, queue_kind
from slabench.workload.transcripts import GradingItem

__all__ = [
    "QUEUE_KINDS",
    "TASKS",
    "AnswerError",
    "GoldenCall",
    "GradingItem",
    "QualityResult",
    "QualitySummary",
    "QueueItem",
    "Task",
    "WorkloadSettings",
    "answer_schema",
    "build_item",
    "build_messages",
    "item_from_ref",
    "item_ref",
    "load_golden",
    "load_queue",
    "load_settings",
    "parse_answer",
    "prompt_tokens",
    "queue_kind",
    "score_answer",
    "simulated_answer",
    "summarize_quality",
    "system_prompt",
    "verify_dataset",
    "write_dataset",
]
