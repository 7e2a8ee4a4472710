"""Locust's default options, asked for once per option on every spawn message a worker handles, are computed once
per process and handed out as copies (the integration test counts the parser builds in a real --processes run)."""

from __future__ import annotations

import pytest
from locust import argument_parser

from slabench.locust.spawn_messages import compute_default_options_once


def test_the_defaults_are_computed_once_and_each_caller_gets_its_own_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    original = argument_parser.default_args_dict
    monkeypatch.setattr(argument_parser, "default_args_dict", original)  # put back after the test
    builds = []
    real_setup = argument_parser.setup_parser_arguments
    monkeypatch.setattr(argument_parser, "setup_parser_arguments", lambda p: (builds.append(1), real_setup(p))[1])
    compute_default_options_once()
    compute_default_options_once()  # idempotent: no cache around the cache
    first = argument_parser.default_args_dict()
    first["host"] = "changed by a caller"
    second = argument_parser.default_args_dict()
    assert len(builds) == 1
    assert second == original() and second["host"] != "changed by a caller"
    assert argument_parser.default_args_dict.__wrapped__ is original  # type: ignore[attr-defined]
