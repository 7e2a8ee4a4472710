"""Synthetic calls: deterministic, token-exact, and their text shows the behaviour their scores describe."""

from __future__ import annotations

import dataclasses
import re
import statistics

import pytest

from slabench.core.tokens import estimate_tokens
from slabench.workload import phrases as P
from slabench.workload.accounts import load_settings
from slabench.workload.prompts import example_answer
from slabench.workload.rubric import score_call
from slabench.workload.transcripts import evidence_line, generate_call
from tests.helpers.workload_support import sample_calls

LINE = re.compile(r"^\[(\d\d):(\d\d)\] (?:(Agent|Customer|IVR|Specialist): \S|\()")


def _templates(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, tuple | list):
        for x in obj:
            yield from _templates(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _templates(x)
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            yield from _templates(getattr(obj, f.name))


def test_same_seed_same_call_and_different_seeds_differ():
    s = load_settings()
    a, b = generate_call(s, "A", 12345, "x"), generate_call(s, "A", 12345, "x")
    assert a == b
    assert generate_call(s, "A", 12346, "x").transcript != a.transcript
    assert generate_call(s, "B", 12345, "x").transcript != a.transcript


def test_slots_never_touch_letters_so_token_counts_add_up():
    for name in dir(P):
        if name.startswith("__"):
            continue
        for t in _templates(getattr(P, name)):
            assert "}{" not in t, (name, t)
            for m in re.finditer(r"\{(\w+)\}", t):
                before = t[m.start() - 1] if m.start() else " "
                after = t[m.end()] if m.end() < len(t) else " "
                assert not re.match(r"\w", before) and not re.match(r"\w", after), (name, t)


def test_transcript_tokens_are_the_estimator_count():
    for c in sample_calls():
        assert c.transcript_tokens == estimate_tokens(c.transcript), c.item_id


def test_lines_have_timestamps_and_speakers_in_order():
    for c in sample_calls():
        times = []
        for line in c.transcript.split("\n"):
            m = LINE.match(line)
            assert m, (c.item_id, line)
            times.append(int(m.group(1)) * 60 + int(m.group(2)))
        assert times == sorted(times)
        assert times[-1] <= c.minutes * 60
        assert "{" not in c.transcript and "}" not in c.transcript  # every slot filled


def test_ground_truth_follows_the_scoring_rule():
    s = load_settings()
    for c in sample_calls():
        acct = s.accounts[c.account]
        assert [i for i, _ in c.scores] == list(acct.rubric)
        cs = score_call(acct.items, c.score_map, acct.recording_disclosure_required, s.pass_threshold)
        assert c.autofail == cs.autofail and c.passed == cs.passed
        assert c.overall == (None if cs.overall is None else round(cs.overall, 2))


def _has(c, lines) -> bool:
    return any(line.split("{")[0] in c.transcript for line in lines)


def test_the_text_shows_the_scored_behaviour():
    """The agent who skipped verification really skips it, card numbers are really read aloud, and so on."""
    checked = 0
    for c in sample_calls():
        s = c.score_map
        brand = load_settings().accounts[c.account].name
        first_agent = next(line for line in c.transcript.split("\n") if "] Agent: " in line)
        assert (brand in first_agent) == (s[1] == "Y"), c.item_id
        assert ("IVR: " in c.transcript) == (s.get(2) == "NA") or 2 not in s
        if s.get(4) == "N":
            assert _has(c, P.VERIFY_SKIP_DONE) and not _has(c, P.VERIFY_ASK + P.VERIFY_ASK_CARD)
        if s.get(4) == "Y":
            assert _has(c, P.VERIFY_ASK + P.VERIFY_ASK_CARD)
        if s.get(17) == "N":
            assert "[card number redacted]" in c.transcript
        if s.get(17) == "Y":
            assert "(secure keypad entry)" in c.transcript and "[card number redacted]" not in c.transcript
        if 11 in s:
            assert ("(caller on hold" in c.transcript) == (s[11] != "NA")
        if s.get(12) == "NA":
            assert "transfer" not in c.transcript.lower().replace("transferring you to our secure", "")
        if s.get(10) == 1:
            assert _has(c, P.COURTESY[1])
        if s.get(26) == "N":
            assert _has(c, P.CONSENT_SKIP)
        if s.get(19) == "NA":
            assert _has(c, P.OFFER_OPTOUT)
        if s.get(20) == "Y":
            assert _has(c, P.RECAP)
        checked += 1
    assert checked == len(sample_calls())


def test_evidence_points_at_the_behaviour_line():
    for c in sample_calls():
        s = c.score_map
        if s.get(13) is not None:
            line = evidence_line(c, 13)
            assert line is not None and line.startswith(P.POLICY[_topic(c)][s[13]].split("{")[0][:20])
        if s.get(4) == "Y":
            assert evidence_line(c, 4) in P.VERIFY_ASK + P.VERIFY_ASK_CARD
        if s.get(17) == "N":
            assert evidence_line(c, 17) in P.PCI_UNSAFE


def _topic(c) -> str:
    t = P.INTENTS[c.intent].topic
    return "credit" if c.account == "F" and t == "subscription" else t


def test_output_lengths():
    s = load_settings()
    for c in sample_calls():
        assert c.verbose_tokens == min(s.output.base_tokens + sum(c.item_output_tokens), s.output.max_tokens)
        assert len(c.item_output_tokens) == len(c.scores)
        assert c.terse_tokens == estimate_tokens(example_answer(c, "terse"))
    per_item = [t for c in sample_calls() for t in c.item_output_tokens]
    assert 50 <= statistics.median(per_item) <= 60  # LogNormal(ln 55, 0.35)


@pytest.mark.parametrize("account", ["A", "B", "C", "D", "E", "F"])
def test_transcript_length_tracks_call_minutes(account):
    """Median transcript tokens ≈ median minutes × tokens/minute; short calls cannot drop below the lines their
    scored behaviour needs, so small-rubric accounts run somewhat long (documented in docs/workload.md)."""
    s = load_settings()
    a = s.accounts[account]
    calls = [generate_call(s, account, seed, "x") for seed in range(300, 500)]
    ratio = statistics.median(c.transcript_tokens for c in calls) / (a.minutes_median * a.tokens_per_minute)
    assert 0.9 <= ratio <= 1.35, ratio


def test_unknown_account_is_a_user_error():
    from slabench.core.errors import UserError

    with pytest.raises(UserError, match="unknown account 'Z'"):
        generate_call(load_settings(), "Z", 1, "x")
