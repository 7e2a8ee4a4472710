"""A stream event's JSON is read by orjson for speed; what is accepted must not change with the parser: orjson
refuses some texts Python's json reads, and those are decided by the stdlib. (One difference stays, on purpose: an
integer past 64 bits.)"""

from __future__ import annotations

import json
import math

import pytest

from slabench.client import _apply_chunk, _loads, _Shape, _Stream

STDLIB_ONLY = {
    "NaN": '{"usage": {"completion_tokens": NaN}}',
    "Infinity": '{"x": -Infinity}',
    "a lone surrogate": '{"choices": [{"delta": {"content": "\\ud83d"}}]}',
}


@pytest.mark.parametrize("text", STDLIB_ONLY.values(), ids=STDLIB_ONLY.keys())
def test_what_python_reads_is_read_alike(text):
    got, want = _loads(text), json.loads(text)
    assert json.dumps(got) == json.dumps(want) or (math.isnan(got["usage"]["completion_tokens"]))


@pytest.mark.parametrize("text", ['{"a": 1', "[" * 5000 + "]" * 5000, "{'a': 1}", '{"a": 1} x'])
def test_what_neither_reads_is_refused(text):
    with pytest.raises((ValueError, RecursionError)):
        _loads(text)


def test_a_token_count_past_64_bits_is_refused_not_believed():
    """orjson reads such an integer as a float; a usage count must be an int, so no server can claim 10^29 tokens."""
    obj = _loads('{"usage": {"prompt_tokens": 123456789012345678901234567890}}')
    with pytest.raises(_Shape, match="not a token count"):
        _apply_chunk(obj, 0.0, _Stream())


def test_an_ordinary_chunk_is_the_same_object():
    chunk = '{"id":"c","choices":[{"index":0,"delta":{"content":"hé"},"finish_reason":null}],"usage":null}'
    assert _loads(chunk) == json.loads(chunk)
