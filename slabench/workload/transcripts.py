"""One synthetic retail call from a seed: its ground truth first, then a transcript that shows exactly that.

`generate_call(settings, account, seed, item_id)` is a pure function of its arguments: the same seed gives the same
bytes on every machine (only `random.Random` with an explicit integer seed is used, whose streams Python keeps
stable). The order is: call length and intent → call context (IVR notice, hold, transfer, card payment...) → agent
skill → a score for every rubric item → the lines that show those scores → neutral talk until the call is as long
as its sampled minutes × tokens-per-minute (by `slabench.core.tokens.estimate_tokens`) → timestamps.
"""

from __future__ import annotations

import functools
import math
import random
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from slabench.core.tokens import estimate_tokens
from slabench.workload import phrases as P
from slabench.workload.accounts import Account, WorkloadSettings
from slabench.workload.rubric import Score, score_call

_LINE_OVERHEAD = 7  # "[mm:ss] " is 5 estimator tokens, "Agent:" 2
# What every token count in the dataset means (stated in the manifest and by `slabench dataset stats`).
ESTIMATOR = "slabench.core.tokens.estimate_tokens (regex \\w+|[^\\w\\s]: words and punctuation marks)"

T = TypeVar("T")
# One transcript turn: (speaker or None for an event line, text, rubric ids it is evidence for, estimator tokens,
# seconds of silence after it)
Turn = tuple[str | None, str, tuple[int, ...], int, int]


@dataclass(frozen=True, slots=True)
class GradingItem:
    """One call to grade: the transcript and its ground truth. Golden calls and queue items are both this type."""

    item_id: str
    account: str
    seed: int
    intent: str
    minutes: float
    transcript: str
    transcript_tokens: int  # estimate_tokens(transcript)
    scores: tuple[tuple[int, Score], ...]  # (rubric item id, score) in the account's rubric order
    autofail: tuple[int, ...]  # failed auto-fail items (the call scores 0)
    overall: float | None  # rounded to 2 decimals; None only if every item is NA
    passed: bool | None
    evidence: tuple[tuple[int, int], ...] = ()  # (item id, transcript line index) of the line showing the score
    item_output_tokens: tuple[int, ...] = ()  # verbose answer: target tokens per rubric item
    verbose_tokens: int = 0  # verbose answer length target: base + Σ item_output_tokens, capped at max_tokens
    terse_tokens: int = 0  # the terse answer's length (estimate_tokens of the exact answer)

    def output_tokens(self, task: str) -> int:
        """How long a good answer is for `task` ("verbose" | "terse"), by `slabench.core.tokens.estimate_tokens`."""
        return self.verbose_tokens if task == "verbose" else self.terse_tokens

    @property
    def score_map(self) -> dict[int, Score]:
        return dict(self.scores)

    @property
    def item_ids(self) -> tuple[int, ...]:
        return tuple(i for i, _ in self.scores)


@dataclass(frozen=True, slots=True)
class CallContext:
    intent: str
    ivr_disclosure: bool
    hold: bool
    transfer: bool
    offer_optout: bool
    card_payment: bool


class _Rng(random.Random):
    """A call's random stream. `pick` is one uniform draw from a sequence: one C call instead of random.choice's
    bit-twiddling (replay rebuilds thousands of calls a second)."""

    def pick(self, seq: Sequence[T]) -> T:
        return seq[int(self.random() * len(seq))]


class _CompactRng(_Rng):
    """The stream of a call resized for a model that spends more tokens per word than the estimator: each line is
    drawn from the shorter half of its equivalent phrasings (the same one draw, so the call's other draws stay where
    they were). A short call has little neutral talk to give up; its scored lines must be shorter too."""

    def pick(self, seq: Sequence[T]) -> T:
        if isinstance(seq, tuple) and len(seq) > 1 and isinstance(seq[0], str):
            seq = _shorter_half(seq)
        return seq[int(self.random() * len(seq))]


def _text_length(option: object) -> int:
    return len(option) if isinstance(option, str) else 0


@functools.lru_cache(maxsize=1024)
def _shorter_half(options: tuple[T, ...]) -> tuple[T, ...]:
    """The shorter half of equivalent phrasings (strings)."""
    return tuple(sorted(options, key=_text_length)[: (len(options) + 1) // 2])


def _int(rng: _Rng, lo: int, hi: int) -> int:
    """Uniform integer in [lo, hi] (like randint, without its per-call overhead)."""
    return lo + int(rng.random() * (hi - lo + 1))


def _clip(x: float, lo: float, hi: float) -> float:
    return lo if x < lo else hi if x > hi else x


def sample_context(settings: WorkloadSettings, account: Account, rng: _Rng) -> CallContext:
    intents = list(account.intents)
    intent = rng.choices(intents, weights=[account.intents[k] for k in intents])[0]
    c = settings.behaviour.context
    return CallContext(
        intent=intent,
        ivr_disclosure=rng.random() < c.ivr_disclosure,
        hold=rng.random() < c.hold,
        transfer=rng.random() < c.transfer,
        offer_optout=rng.random() < c.offer_optout,
        card_payment=rng.random() < P.INTENTS[intent].card_payment,
    )


def sample_scores(settings: WorkloadSettings, ctx: CallContext, rng: _Rng) -> dict[int, Score]:
    """A score for every master-rubric item (the account grades its subset). NA comes from the context only."""
    b = settings.behaviour
    it = P.INTENTS[ctx.intent]
    skill = rng.betavariate(b.skill_alpha, b.skill_beta)
    shift = b.skill_effect * (skill - b.skill_mean)

    def yn(i: int) -> str:
        return "Y" if rng.random() < b.yes_base[i] + shift else "N"

    def failing(i: int) -> str:  # auto-fail behaviours have their own, skill-independent rate
        return "N" if rng.random() < b.autofail_rate[i] else "Y"

    def scale(low: int = 1) -> int:
        return int(_clip(round(1 + 4 * skill + rng.gauss(0, b.scale_noise_sd)), low, 5))

    offer_made = not ctx.offer_optout and yn(19) == "Y"
    process = scale()
    s: dict[int, Score] = {
        1: yn(1),
        2: "NA" if ctx.ivr_disclosure else failing(2),
        3: yn(3),
        4: failing(4) if it.needs_account else "NA",
        5: yn(5) if it.needs_account else "NA",
        6: scale(),
        7: yn(7),
        8: scale(),
        9: scale(),
        10: 1 if rng.random() < b.autofail_rate[10] else scale(low=2),
        11: yn(11) if ctx.hold else "NA",
        12: yn(12) if ctx.transfer else "NA",
        13: scale(),
        14: process,
        15: yn(15),
        16: "N" if process <= 2 else yn(16),  # sending the caller the wrong way is not ownership
        17: failing(17) if ctx.card_payment else "NA",
        18: yn(18) if offer_made else "NA",
        19: "NA" if ctx.offer_optout else ("Y" if offer_made else "N"),
        20: yn(20),
        21: yn(21),
        22: yn(22),
        23: "NA" if ctx.transfer else yn(23),
        # compliance items apply only where the process really changed something (levels 1-3 change nothing)
        24: yn(24) if it.credit_change and process >= 4 else "NA",
        25: yn(25) if it.dispute and process >= 3 else "NA",
        26: failing(26) if it.change and process >= 4 else "NA",
    }
    return s


def call_slots(account: Account, intent: P.IntentText, rng: _Rng) -> _Slots:
    """The per-call names and numbers the templates refer to."""
    v = account.vertical
    first, last = rng.pick(P.FIRST_NAMES), rng.pick(P.LAST_NAMES)
    pol = account.policy
    order_no = f"{P.ORDER_PREFIX[v]}-{_int(rng, 10_000_000, 100_000_000 - 1)}"
    slots = {
        "brand": account.name,
        "agent": rng.pick(P.AGENT_NAMES),
        "cust_first": first,
        "cust_last": last,
        "cust": f"{first} {last}",
        "product": (product := rng.pick(P.PRODUCTS[v])),
        "a_product": ("an " if product[0] in "aeiou" else "a ") + product,
        "order": order_no,
        "order_date": f"{rng.pick(P.MONTHS)} {_int(rng, 1, 28)}",
        "weekday": rng.pick(P.WEEKDAYS),
        "month": rng.pick(P.MONTHS),
        "email": f"{first[0].lower()}.{last.lower()}{_int(rng, 1, 99)}@{rng.pick(P.EMAIL_DOMAINS)}",
        "zip": f"{_int(rng, 10000, 99999 - 1):05d}",
        "street_no": str(_int(rng, 2, 980)),
        "street": rng.pick(P.STREETS),
        "phone_tail": f"{_int(rng, 0, 10000 - 1):04d}",
        "amount": f"${_int(rng, 12, 899)}.{rng.pick(('00', '49', '95', '99'))}",
        "rma": str(_int(rng, 100_000, 1_000_000 - 1)),
        "serial": str(_int(rng, 100_000, 1_000_000 - 1)),
        "card_last4": f"{_int(rng, 0, 10000 - 1):04d}",
        "new_last4": f"{_int(rng, 0, 10000 - 1):04d}",
        "dob": f"{rng.pick(P.MONTHS)} {_int(rng, 1, 28)}, {_int(rng, 1950, 2003)}",
        "exp": f"{_int(rng, 1, 12):02d}/{_int(rng, 26, 31)}",
        "limit": f"${rng.pick((3, 4, 5, 6, 7, 8))},{rng.pick(('000', '500'))}",
        "due_day": f"{_int(rng, 1, 28)}th",
        "occasion": rng.pick(P.OCCASIONS),
        "carrier": rng.pick(P.CARRIERS),
        "specialist": rng.pick(P.SPECIALISTS),
        "team": intent.team,
        "team_cap": intent.team[0].upper() + intent.team[1:],
        # policy facts, and the distorted versions lower policy-accuracy levels quote
        "return_days": str(pol.return_days),
        "near_days": str(pol.return_days + (15 if pol.return_days < 30 else -20)),
        "far_days": str(pol.return_days * 3),
        "return_condition": pol.return_condition,
        "refund_days": pol.refund_days,
        "restocking_fee": pol.restocking_fee,
        "warranty_months": str(pol.warranty_months),
        "near_months": str(pol.warranty_months + 6),
        "warranty_scope": pol.warranty_scope,
        "report_hours": str(pol.report_hours),
        "delivery_days": pol.delivery_days,
        "renewal_day": pol.renewal_day or "1st",
        "dispute_days": str(pol.dispute_days or 60),
        "provisional_credit_days": str(pol.provisional_credit_days or 10),
        "investigation_days": str(pol.investigation_days or 90),
        "apr": pol.apr or "29.99%",
        "late_fee": pol.late_fee or "$40",
    }
    for name in ("issue", "want", "recap"):
        slots[name] = getattr(intent, name).format_map(slots)
    slots["recap_weak"] = P.RECAP_WEAK.format_map(slots)
    if intent.change:
        slots["change"] = intent.change.format_map(slots)
        slots["changed"] = (intent.changed or intent.change).format_map(slots)
    return _Slots(slots)


_SILENT: dict[int, Score] = {
    2: "NA", 5: "NA", 7: "N", 8: 3, 11: "NA", 12: "NA", 15: "N", 17: "NA", 18: "NA", 19: "NA", 20: "N", 21: "N",
    23: "NA", 24: "NA", 25: "NA", 26: "NA",
}  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _static_tokens(text: str) -> int:
    return estimate_tokens(text)


@functools.lru_cache(maxsize=4096)
def _template_tokens(template: str) -> tuple[int, tuple[str, ...]]:
    """Tokens of a template's literal text, and its slot names. A slot is never glued to a letter or digit (a test
    checks every template), so a filled line has exactly these tokens plus its slot values' tokens."""
    parts = list(string.Formatter().parse(template))
    literal = "".join(lit for lit, _, _, _ in parts)
    return estimate_tokens(literal), tuple(name for _, name, _, _ in parts if name)


class _Slots(dict[str, str]):
    """A call's slot values, with each value's token count computed once."""

    __slots__ = ("_tokens",)

    def __init__(self, values: dict[str, str]) -> None:
        super().__init__(values)
        self._tokens: dict[str, int] = {}

    def tokens(self, name: str) -> int:
        n = self._tokens.get(name)
        if n is None:
            n = self._tokens[name] = estimate_tokens(self[name])
        return n


class _Script:
    """Turns as (speaker, text, rubric ids this line is evidence for, line tokens, seconds of silence after it);
    speaker None is an event line such as a hold."""

    __slots__ = ("rng", "slots", "tokens", "turns")

    def __init__(self, rng: _Rng, slots: _Slots) -> None:
        self.rng = rng
        self.slots = slots
        self.turns: list[Turn] = []
        self.tokens = 0  # estimate_tokens of the rendered lines

    def say(self, speaker: str | None, template: str, *evidence: int, pause_s: int = 0) -> None:
        if "{" in template:
            text = template.format_map(self.slots)
            base, names = _template_tokens(template)
            n = base + sum(self.slots.tokens(k) for k in names)
        else:
            text, n = template, _static_tokens(template)
        n += _LINE_OVERHEAD - (0 if speaker else 2)
        self.turns.append((speaker, text, evidence, n, pause_s))
        self.tokens += n

    def pick(self, speaker: str | None, options: tuple[str, ...], *evidence: int) -> None:
        self.say(speaker, self.rng.pick(options), *evidence)

    def append_to_agent(self, idx: int, template: str, *evidence: int) -> None:
        """Add a sentence to agent turn `idx` (a courtesy word rides on what they say anyway)."""
        speaker, text, ev, n, pause_s = self.turns[idx]
        extra = template.format_map(self.slots) if "{" in template else template
        k = estimate_tokens(extra)
        self.turns[idx] = (speaker, f"{text} {extra}", (*ev, *evidence), n + k, pause_s)
        self.tokens += k


class _Deck:
    """Draw without replacement, so a call does not repeat itself until it must."""

    __slots__ = ("_left", "_pool", "_rng")

    def __init__(self, rng: _Rng, pool: tuple[str, ...]) -> None:
        self._rng, self._pool = rng, pool
        self._left: list[str] = []

    def draw(self) -> str:
        if not self._left:
            self._left = _shuffled(self._rng, self._pool)
        return self._left.pop()


class _Decks:
    """The call's neutral talk: the intent's own details first, then generic lines, each used once; past that,
    combinatorial narrative and system talk, so long calls do not loop."""

    __slots__ = ("_details", "_generic", "_neutral", "_rng", "_smalltalk", "_vertical")

    def __init__(self, rng: _Rng, it: P.IntentText, vertical: str) -> None:
        self._rng = rng
        self._details = _shuffled(rng, it.details)
        self._smalltalk = _shuffled(rng, P.CUSTOMER_SMALLTALK)
        self._neutral = _Deck(rng, P.AGENT_NEUTRAL)
        self._vertical = _shuffled(
            rng, [(a, c) for a, c, needs in P.VERTICAL_FILLER[vertical] if it.has_item or not needs]
        )
        self._generic = _shuffled(rng, P.GENERIC_FILLER)

    def detail(self) -> str:
        if self._details:
            return self._details.pop()
        if self._smalltalk:
            return self._smalltalk.pop()
        r = self._rng
        return f"{r.pick(P.NARRATIVE_WHEN)} {r.pick(P.NARRATIVE_DID)}, {r.pick(P.NARRATIVE_OUTCOME)}."

    def neutral(self) -> str:
        return self._neutral.draw()

    def pair(self) -> tuple[str, str]:
        if self._vertical:
            return self._vertical.pop()
        if self._generic:
            return self._generic.pop()
        r = self._rng
        return r.pick(P.SYSTEM_STATE).replace("{thing}", r.pick(P.SYSTEM_THING)), r.pick(P.CUSTOMER_WAIT)


def _shuffled(rng: _Rng, seq: Iterable[T]) -> list[T]:
    out = list(seq)
    for i in range(len(out) - 1, 0, -1):  # Fisher-Yates on rng.random(): cheaper than random.shuffle
        j = int(rng.random() * (i + 1))
        out[i], out[j] = out[j], out[i]
    return out


def _agent_customer(
    rng: _Rng, slots: _Slots, pairs: Iterable[tuple[str, str]], evidence: tuple[int, ...] = ()
) -> _Script:
    s = _Script(rng, slots)
    for q, a in pairs:
        s.say("Agent", q, *evidence)
        s.say("Customer", a)
    return s


def _script(
    account: Account, ctx: CallContext, s: dict[int, Score], rng: _Rng, slots: _Slots, deck: _Decks
) -> tuple[_Script, list[_Script], _Script, _Script]:
    """The call's turns in sections: (opening, discussion blocks, resolution, closing). Filler goes between the
    discussion blocks, so every behaviour line stays where a real agent would say it."""
    it = P.INTENTS[ctx.intent]
    v = account.vertical
    card_vertical = v == "card"
    listen, probing, empathy, tone_level, policy, process = (_level(s, i) for i in (6, 8, 9, 10, 13, 14))

    head = _Script(rng, slots)
    if ctx.ivr_disclosure:
        head.say("IVR", P.IVR_DISCLOSURE, 2)
    greeting = rng.pick(P.GREETING_YES if s[1] == "Y" else P.GREETING_NO)
    assist = rng.pick(P.ASSIST_YES) if s[3] == "Y" else ""
    head.say("Agent", greeting + assist, *((1, 3) if s[3] == "Y" else (1,)))
    opening = rng.pick(it.opening)
    if s[3] == "N":
        keep = opening.startswith(("I ", "I'"))
        opening = rng.pick(P.CUSTOMER_UNPROMPTED) + (opening if keep else opening[0].lower() + opening[1:])
    optout = ctx.offer_optout and s[19] == "NA" and 19 in account.rubric
    if optout:
        opening += " " + rng.pick(P.OFFER_OPTOUT)
    head.say("Customer", opening, *((19,) if optout else ()))
    if s[2] == "Y":
        head.pick("Agent", P.RECORDING_YES, 2)
    # identity, then order/contact details
    if s[4] == "Y":
        head.pick("Agent", P.VERIFY_ASK_CARD if card_vertical else P.VERIFY_ASK, 4)
        head.pick("Customer", P.VERIFY_ANSWER_CARD if card_vertical else P.VERIFY_ANSWER)
        head.pick("Agent", P.VERIFY_DONE)
    elif s[4] == "N":
        head.pick("Agent", P.VERIFY_SKIP_ASK)
        head.say("Customer", "{cust}.")
        head.pick("Agent", P.VERIFY_SKIP_DONE, 4)
    if it.has_order:
        head.pick("Customer", P.ORDER_GIVEN)
    if s[5] == "Y":
        head.pick("Agent", P.CONFIRM_ORDER if it.has_order else P.CONFIRM_CONTACT, 5)
        head.pick("Customer", P.CONFIRM_YES)

    blocks: list[_Script] = []
    # empathy answers the caller's frustration
    emo = _Script(rng, slots)
    feeling, specific = rng.pick(P.EMOTION)
    emo.say("Customer", feeling)
    if empathy == 5:
        emo.say("Agent", specific, 9)
        extra = _Script(rng, slots)
        extra.say("Customer", deck.detail())
        extra.pick("Agent", P.EMPATHY[5], 9)
        blocks.append(extra)
    else:
        emo.pick("Agent", P.EMPATHY[empathy], 9)
    blocks.append(emo)
    # probing questions
    probes = list(it.probes)
    probes = _shuffled(rng, probes)
    n_probe = {5: min(4, max(3, len(probes))), 4: 2, 3: 1}.get(probing, 0)
    for i, pair in enumerate(probes[:n_probe]):
        blocks.append(_agent_customer(rng, slots, [pair], (8,) if i == 0 else ()))
    if probing == 2:
        blocks.append(_agent_customer(rng, slots, P.GENERIC_PROBE, (8,)))
    elif probing == 1:
        b = _Script(rng, slots)
        b.pick("Agent", P.ASSUME, 8)
        blocks.append(b)
    # active listening: reflections at the top, lapses and interruptions at the bottom
    for i in range({5: 2, 4: 1}.get(listen, 0)):
        b = _Script(rng, slots)
        b.say("Customer", deck.detail())
        b.say("Agent", it.reflect[i] if listen == 5 else "Okay, got it.", 6)
        blocks.append(b)
    lapses = list(P.LAPSE)
    lapses = _shuffled(rng, lapses)
    for pair in lapses[: {3: 1, 2: 2, 1: 2}.get(listen, 0)]:
        blocks.append(_agent_customer(rng, slots, [pair], (6,)))
    if listen <= 2:
        b = _Script(rng, slots)
        cust, agent = rng.pick(P.INTERRUPT)
        b.say("Customer", cust)
        b.say("Agent", agent, 6)
        blocks.append(b)
    if listen == 1:
        blocks.append(_agent_customer(rng, slots, [rng.pick(P.MISSTATE)], (6,)))
    # courtesy and tone
    # courtesy and tone: warm words ride on the agent's own turns; rudeness answers the caller's pushback
    tone = P.COURTESY.get(tone_level, ())
    courtesy = rng.sample(tone, min(len(tone), {5: 3, 4: 1, 2: 1, 1: 2}.get(tone_level, 0)))
    if tone_level <= 2:
        for line in courtesy:
            b = _Script(rng, slots)
            b.pick("Customer", P.PUSHBACK)
            b.say("Agent", line, 10)
            blocks.append(b)
        courtesy = []
    if s[19] != "NA":
        b = _Script(rng, slots)
        b.say("Customer", P.OFFER_CUE[v], 19)
        blocks.append(b)

    res = _Script(rng, slots)
    if s[7] == "Y":
        res.pick("Agent", P.PARAPHRASE, 7)
        res.pick("Customer", P.PARAPHRASE_ACK)
    if s[11] == "Y":
        res.pick("Agent", P.HOLD_ASK, 11)
        res.pick("Customer", P.HOLD_OK)
        _hold(res, _int(rng, 60, 170))
        res.pick("Agent", P.HOLD_BACK_YES)
    elif s[11] == "N":
        res.pick("Agent", P.HOLD_NO, 11)
        _hold(res, _int(rng, 180, 400))
        res.pick("Agent", P.HOLD_BACK_NO)
    if s[16] == "Y":
        res.pick("Agent", P.OWN_YES, 16)
    topic = "credit" if card_vertical and it.topic == "subscription" else it.topic
    res.say("Agent", P.POLICY[topic][policy], 13)
    if s[17] != "NA":
        _card_payment(res, s[17] == "Y")
    if s[24] == "Y":
        res.pick("Agent", P.CREDIT_TERMS, 24)
    if s[26] == "Y":
        res.pick("Agent", P.CONSENT_ASK, 26)
        res.pick("Customer", P.CONSENT_YES)
    _process(res, it, process)
    if s[26] == "N":
        res.pick("Agent", P.CONSENT_SKIP, 26)
    if s[25] == "Y":
        res.pick("Agent", P.DISPUTE_RIGHTS, 25)
    if s[16] == "N":
        res.say("Agent", it.own_no, 16)
    if s[15] == "Y":
        res.say("Agent", it.expect if process >= 4 else P.EXPECT_WEAK, 15)
    if s[19] == "Y":
        res.say("Agent", P.OFFER[v], 19)
        res.pick("Customer", P.OFFER_REPLY)
        if s[18] == "Y":
            res.say("Agent", P.OFFER_TERMS[v], 18)

    tail = _Script(rng, slots)
    if s[20] == "Y":
        recap = rng.pick(P.RECAP)
        tail.say("Agent", recap if process >= 4 else recap.replace("{recap}", "{recap_weak}"), 20)
        tail.say("Customer", "Okay, great.")
    if s[21] == "Y":
        tail.say("Agent", P.ANYTHING_ELSE_TRANSFER if s[12] != "NA" else rng.pick(P.ANYTHING_ELSE), 21)
        tail.pick("Customer", P.ANYTHING_ELSE_NO)
    if s[23] == "Y":
        tail.pick("Agent", P.SURVEY, 23)
    if s[12] == "Y":
        tail.pick("Agent", P.TRANSFER_WARM, 12)
        tail.say(None, "(specialist joins the call)")
        tail.say("Specialist", P.TRANSFER_SPECIALIST[0])
        tail.say("Agent", P.TRANSFER_BRIEF, 12)
        tail.say("Specialist", P.TRANSFER_SPECIALIST[1])
    elif s[12] == "N":
        tail.pick("Agent", P.TRANSFER_COLD, 12)
    tail.pick("Agent", P.CLOSE_YES if s[22] == "Y" else P.CLOSE_NO, 22)
    if s[12] == "N":
        tail.say(None, "(call transferred)")
    else:
        tail.pick("Customer", P.CLOSE_CUSTOMER)
    # levels 4-5: each warm line rides on a different agent turn of the discussion or the resolution
    spots = [(b, i) for b in [*blocks, res] for i, t in enumerate(b.turns) if t[0] == "Agent" and t[1][-1] != "?"]
    for line, (b, i) in zip(courtesy, rng.sample(spots, min(len(spots), len(courtesy))), strict=False):
        b.append_to_agent(i, line, 10)
    return head, blocks, res, tail


def _level(s: Mapping[int, Score], item: int) -> int:
    """A soft-skill item's 1-5 level (`sample_scores` gives each one an integer)."""
    v = s[item]
    if not isinstance(v, int):
        raise ValueError(f"rubric item {item}: a soft skill is scored 1-5, not {v!r}")
    return v


def _hold(res: _Script, seconds: int) -> None:
    m, sec = divmod(seconds, 60)
    res.say(None, f"(caller on hold, {m}:{sec:02d})", pause_s=seconds)


def _process(res: _Script, it: P.IntentText, level: int) -> None:
    if level >= 4:
        steps = it.steps if level == 5 else (it.steps[0], it.steps[2])
        for i, step in enumerate(steps):
            res.say("Agent", step, *((14,) if i == 0 else ()))
            if i < len(steps) - 1:
                res.pick("Customer", ("Okay.", "Mm-hm.", "Got it."))
    else:
        res.say("Agent", {3: it.vague, 2: it.wrong, 1: it.refuse}[level], 14)
        res.pick("Customer", ("Okay...", "Seriously?", "That's not great."))


def _card_payment(res: _Script, safe: bool) -> None:
    if safe:
        res.pick("Agent", P.PCI_SAFE, 17)
        res.say(None, "(secure keypad entry)")
        res.say("Agent", P.PCI_SAFE_DONE)
    else:
        res.pick("Agent", P.PCI_UNSAFE, 17)
        res.say("Customer", P.PCI_UNSAFE_CUSTOMER)
        res.say("Agent", P.PCI_UNSAFE_READBACK, 17)


def _filler(deck: _Decks, rng: _Rng, slots: _Slots) -> _Script:
    """One neutral exchange: no questions, courtesy, empathy or policy, so it never changes a score."""
    b = _Script(rng, slots)
    r = rng.random()
    if r < 0.4:
        agent, cust = deck.pair()
        b.say("Agent", agent)
        b.say("Customer", cust)
    else:
        b.say("Customer", deck.detail() if r < 0.8 else f"{deck.detail()} {deck.detail()}")
        b.say("Agent", deck.neutral())
    return b


def _join(scripts: list[_Script], rng: _Rng, compact: bool = False) -> list[Turn]:
    """Concatenate sections. A caller who speaks twice in a row just keeps talking (one turn); an agent who does
    gets a backchannel from the caller in between, as transcripts of real calls show — or, `compact`, keeps talking
    too (a call resized for a model that spends more tokens per word: its short calls have no room to spare)."""
    turns: list[Turn] = []
    for sc in scripts:
        for t in sc.turns:
            prev = turns[-1] if turns else None
            if prev is not None and t[0] == prev[0] and (t[0] == "Customer" or (compact and t[0] == "Agent")):
                # the second line loses its "[mm:ss] Customer:" prefix
                turns[-1] = (prev[0], f"{prev[1]} {t[1]}", (*prev[2], *t[2]), prev[3] + t[3] - _LINE_OVERHEAD, prev[4])
                continue
            if prev is not None and t[0] == prev[0] == "Agent":
                text = rng.pick(_BACKCHANNEL)
                turns.append(("Customer", text, (), _LINE_OVERHEAD + _static_tokens(text), 0))
            turns.append(t)
    return turns


@functools.cache
def _stamps() -> tuple[str, ...]:
    return tuple(f"[{t // 60:02d}:{t % 60:02d}]" for t in range(3600))


_BACKCHANNEL = ("Okay.", "Mm-hm.", "Right.", "Okay, yeah.")


def _render(turns: Sequence[Turn], duration_s: float) -> tuple[str, dict[int, int]]:
    """Timestamped lines; the clock advances with each line's share of the call's speech, plus any hold."""
    hold_s = sum(t[4] for t in turns)
    rate = sum(t[3] for t in turns) / max(1.0, duration_s - hold_s)  # tokens per second of speech
    lines: list[str] = []
    evidence: dict[int, int] = {}
    t = 0.0
    stamps = _stamps()
    for idx, (speaker, text, ev, n, pause_s) in enumerate(turns):
        stamp = stamps[int(t)] if t < len(stamps) else f"[{int(t) // 60:02d}:{int(t) % 60:02d}]"
        lines.append(f"{stamp} {speaker}: {text}" if speaker else f"{stamp} {text}")
        for i in ev:
            evidence.setdefault(i, idx)
        t += n / rate + pause_s
    return "\n".join(lines), evidence


def _length(settings: WorkloadSettings, account: Account, rng: random.Random) -> tuple[float, float]:
    """The call's minutes and its transcript's length target in tokens: the seed's first draws."""
    lo, hi = settings.call_minutes_clip
    minutes = _clip(rng.lognormvariate(math.log(account.minutes_median), account.minutes_log_sd), lo, hi)
    return minutes, minutes * account.tokens_per_minute * rng.lognormvariate(0.0, settings.transcript_jitter_log_sd)


def length_target(settings: WorkloadSettings, account_key: str, seed: int) -> float:
    """The transcript length (tokens) the call behind (account, seed) aims at."""
    return _length(settings, settings.account(account_key), random.Random(seed))[1]


def generate_call(
    settings: WorkloadSettings, account_key: str, seed: int, item_id: str, token_scale: float = 1.0
) -> GradingItem:
    """The call behind (account, seed). `token_scale` is a model's tokens per estimator token on this text: the
    transcript's length target is then met in the model's tokens (1.0: the estimator's, as the dataset is built)."""
    account = settings.account(account_key)
    # Resized for a model that spends more tokens per word (token_scale > 1): compact phrasing and joins
    compact = token_scale > 1.0
    rng = (_CompactRng if compact else _Rng)(seed)
    minutes, target = _length(settings, account, rng)
    target /= token_scale
    ctx = sample_context(settings, account, rng)
    s = sample_scores(settings, ctx, rng)
    it = P.INTENTS[ctx.intent]
    slots = call_slots(account, it, rng)
    # Behaviour the account does not grade stays out of the call (no recap for grocery...), which keeps short
    # calls as short as their minutes say; the graded items are untouched.
    shown = {**s, **{i: v for i, v in _SILENT.items() if i not in account.rubric}}
    deck = _Decks(rng, it, account.vertical)
    head, blocks, res, tail = _script(account, ctx, shown, rng, slots, deck)

    # Resized for a model (token_scale ≠ 1): the last filler only when it brings the call closer to its target (as
    # built, a call tops up past it: the dataset's calls are kept exactly as they are).
    resized = token_scale != 1.0
    slack = 0.0
    while True:  # joining merges or adds a few turns, so top up until the joined call is long enough
        turns = _join([head, *blocks, res, tail], rng, compact)
        used = sum(t[3] for t in turns)
        if used >= target - slack:
            break
        missing = target - used
        while missing > 0:
            b = _filler(deck, rng, slots)
            if resized and b.tokens > 2 * missing:  # adding it would land further from the target than stopping
                slack = missing
                break
            missing -= b.tokens
            blocks.insert(_int(rng, 0, len(blocks)), b)
    hold_s = sum(t[4] for t in turns)
    # a call with more to say than its sampled length took longer
    duration_s = max(minutes * 60, hold_s + used * token_scale / (account.tokens_per_minute / 60))
    transcript, evidence = _render(turns, duration_s)

    rubric = account.items
    truth = {i.id: s[i.id] for i in rubric}
    cs = score_call(rubric, truth, account.recording_disclosure_required, settings.pass_threshold)
    o = settings.output
    per_item = tuple(round(rng.lognormvariate(math.log(o.per_item_median), o.per_item_log_sd)) for _ in rubric)
    return GradingItem(
        item_id=item_id,
        account=account_key,
        seed=seed,
        intent=ctx.intent,
        minutes=round(duration_s / 60, 2),
        transcript=transcript,
        transcript_tokens=used,  # == estimate_tokens(transcript): lines join on "\n" (a test checks)
        scores=tuple((i.id, truth[i.id]) for i in rubric),
        autofail=cs.autofail,
        overall=None if cs.overall is None else round(cs.overall, 2),
        passed=cs.passed,
        evidence=tuple((i.id, evidence[i.id]) for i in rubric if i.id in evidence),
        item_output_tokens=per_item,
        verbose_tokens=min(o.base_tokens + sum(per_item), o.max_tokens),
        terse_tokens=terse_answer_tokens(truth.values()),
    )


def terse_answer_tokens(scores: Iterable[Score]) -> int:
    """estimate_tokens of ``{"items": [{"id": 1, "score": "Y"}, ...]}``: 8 tokens of wrapper, a comma between
    entries, 15 per entry with a quoted score and 13 with an integer one (a test checks against the estimator)."""
    values = list(scores)
    return 8 + max(0, len(values) - 1) + sum(15 if isinstance(v, str) else 13 for v in values)


def evidence_line(item: GradingItem, rubric_id: int) -> str | None:
    """The transcript line (without timestamp and speaker) that shows this item's score, if one does."""
    for i, idx in item.evidence:
        if i == rubric_id:
            line = item.transcript.split("\n")[idx]
            text = line[line.index("]") + 2 :]
            head, sep, rest = text.partition(": ")
            return rest if sep and head in ("Agent", "Customer", "IVR", "Specialist") else text
    return None


__all__ = ["ESTIMATOR", "CallContext", "GradingItem", "evidence_line", "generate_call", "terse_answer_tokens"]
