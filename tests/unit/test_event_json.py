"""Stream events are read and record lines written by orjson for speed; what is accepted or written must not change
with it: what orjson refuses and Python's json handles is left to the stdlib. (One difference stays, on purpose: a
token count past 64 bits is refused.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from slabench.core.jsonl import json_line
from slabench.core.protocols import Stream as _Stream
from slabench.core.protocols import apply_chunk as _apply_chunk
from slabench.core.protocols import loads as _loads

STDLIB_ONLY = {
    "NaN": '{"usage": {"completion_tokens": NaN}}',
    "Infinity": '{"x": -Infinity}',
    "a lone surrogate": '{"choices": [{"delta": {"content": "\\ud83d"}}]}',
}


@pytest.mark.parametrize("text", STDLIB_ONLY.values(), ids=STDLIB_ONLY.keys())
def test_what_python_reads_is_read_alike(text):
    got, want = _loads(text), json.loads(text)
    assert json.dumps(got) == json.dumps(want)


@pytest.mark.parametrize("text", ['{"a": 1', "[" * 5000 + "]" * 5000, "{'a': 1}", '{"a": 1} x'])
def test_what_neither_reads_is_refused(text):
    with pytest.raises((ValueError, RecursionError)):
        _loads(text)


def test_a_token_count_past_64_bits_is_refused_not_believed():
    """orjson reads such an integer as a float; a usage count must be an int, so no server can claim 10^29 tokens."""
    obj = _loads('{"usage": {"prompt_tokens": 123456789012345678901234567890}}')
    s = _Stream("r")
    _apply_chunk(obj, 0.0, s)
    assert s.prompt_tokens is None and "not a token count" in (s.bad_usage or "")


def test_an_ordinary_chunk_is_the_same_object():
    chunk = '{"id":"c","choices":[{"index":0,"delta":{"content":"hé"},"finish_reason":null}],"usage":null}'
    assert _loads(chunk) == json.loads(chunk)


@pytest.mark.parametrize(
    "value",
    [np.float64(0.25), np.int64(7), "\ud83d", 2**70],
    ids=["numpy float", "numpy int", "lone surrogate", "int past 64 bits"],
)
def test_a_line_orjson_refuses_is_still_written(value):
    """A grader's numpy number or an odd string is not a record lost to the encoder: the stdlib writes it."""
    assert json.loads(json_line({"v": value})) == {"v": value.item() if hasattr(value, "item") else value}
