"""The master QA rubric (docs/workload.md) and the scoring rule.

Scores are ``"Y"``, ``"N"``, ``"NA"`` for Yes/No items and the integers 1–5 for soft skills. The rule: Y=1, N=0,
NA excluded, 1–5 maps to (x−1)/4; overall = 100·Σw·s/Σw over the items that are not NA; any failed auto-fail item
sets the overall score to 0 and flags the call; pass at ≥ the threshold (an assumption, in the settings file).

Items 24–26 are the store-card compliance items only account F uses; their weights are assumptions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

Score = str | int  # "Y" | "N" | "NA" | 1..5
Scale = Literal["YN", "YNNA", "1-5"]
# How an item auto-fails: on "N", on a 1, or on "N" only where the account requires it (recording disclosure).
AutoFail = Literal["N", "1", "N_required"] | None

SCALE_VALUES: dict[str, tuple[Score, ...]] = {
    "YN": ("Y", "N"),
    "YNNA": ("Y", "N", "NA"),
    "1-5": (1, 2, 3, 4, 5),
}
SCALE_LABEL = {"YN": "Y/N", "YNNA": "Y/N/NA", "1-5": "1-5"}


@dataclass(frozen=True, slots=True)
class RubricItem:
    id: int
    name: str
    scale: Scale
    weight: int
    autofail: AutoFail
    anchors: tuple[tuple[str, str], ...]  # (score label, what it looks like in the call)

    def allows(self, value: object) -> bool:
        # bool is an int subclass: True must not pass as a 1
        return not isinstance(value, bool) and value in SCALE_VALUES[self.scale]


def _i(id_: int, name: str, scale: Scale, weight: int, autofail: AutoFail, *anchors: tuple[str, str]) -> RubricItem:
    return RubricItem(id_, name, scale, weight, autofail, anchors)


MASTER_RUBRIC: tuple[RubricItem, ...] = (
    _i(1, "Branded greeting and agent name", "YN", 4, None,
       ("Y", "opens with the brand name and the agent's own name"),
       ("N", "brand or agent name missing from the opening")),
    _i(2, "Recording disclosure", "YNNA", 2, "N_required",
       ("Y", "the agent tells the caller the call is recorded"),
       ("N", "no recording notice from the agent or the IVR"),
       ("NA", "the IVR already played the recording notice")),
    _i(3, "Offers assistance", "YN", 2, None,
       ("Y", "asks how they can help before the caller starts"),
       ("N", "no offer of help; the caller has to start unprompted")),
    _i(4, "Identity verified", "YNNA", 6, "N",
       ("Y", "verifies two identifiers (e.g. email and ZIP) before discussing or changing the account"),
       ("N", "discusses or changes account or order details without verification"),
       ("NA", "no account or order information was accessed")),
    _i(5, "Confirms order / contact details", "YNNA", 2, None,
       ("Y", "reads back the order number or contact details and gets a yes"),
       ("N", "uses order or contact details without confirming them"),
       ("NA", "no order or contact details involved")),
    _i(6, "Active listening", "1-5", 6, None,
       ("5", "reflects the caller's specifics back; never makes them repeat or talks over them"),
       ("4", "attentive, only generic acknowledgements, no lapses"),
       ("3", "one lapse: asks for something already given, or talks over the caller once"),
       ("2", "several lapses and an interruption"),
       ("1", "repeatedly interrupts, ignores or misstates what the caller said")),
    _i(7, "Paraphrases the issue", "YN", 4, None,
       ("Y", "restates the issue in their own words before solving it"),
       ("N", "never restates the issue")),
    _i(8, "Probing questions", "1-5", 4, None,
       ("5", "three or more targeted questions that uncover the cause and the details needed"),
       ("4", "two relevant questions"),
       ("3", "one relevant question"),
       ("2", "only a generic or closed question"),
       ("1", "no questions; assumes the cause")),
    _i(9, "Empathy", "1-5", 5, None,
       ("5", "specific, sincere empathy tied to the caller's situation, more than once"),
       ("4", "one genuine apology or empathy statement"),
       ("3", "a perfunctory acknowledgement only"),
       ("2", "no empathy even when the caller says they are frustrated"),
       ("1", "dismisses the caller's feelings or problem")),
    _i(10, "Courtesy and tone", "1-5", 3, "1",
       ("5", "consistently warm and polite: please, thank you, patience"),
       ("4", "polite, with occasional courtesy words"),
       ("3", "neutral and brisk, no courtesy words"),
       ("2", "impatient or condescending at least once"),
       ("1", "rude or hostile: blames, mocks, 'not my problem'")),
    _i(11, "Hold etiquette", "YNNA", 3, None,
       ("Y", "asks permission, gives an expected time, thanks the caller on return"),
       ("N", "puts the caller on hold without permission or without thanks"),
       ("NA", "no hold")),
    _i(12, "Warm transfer", "YNNA", 2, None,
       ("Y", "explains why, stays on the line and briefs the next person"),
       ("N", "cold transfer without a handover"),
       ("NA", "no transfer")),
    _i(13, "Policy accuracy (returns, refunds, warranty)", "1-5", 10, None,
       ("5", "states the policy in the reference correctly and completely"),
       ("4", "correct but leaves out one detail"),
       ("3", "vague, hedged, or one detail wrong"),
       ("2", "materially wrong (wrong window, wrong refund method)"),
       ("1", "contradicts the policy or promises what it forbids")),
    _i(14, "Correct process (RMA, refund)", "1-5", 10, None,
       ("5", "every required step, in order"),
       ("4", "all steps but one minor omission"),
       ("3", "a required step skipped"),
       ("2", "wrong process: sends the caller the wrong way"),
       ("1", "no process, or refuses a request the process covers")),
    _i(15, "Sets expectations", "YN", 6, None,
       ("Y", "says what happens next and when"),
       ("N", "no timeline or next steps")),
    _i(16, "Ownership / first-contact resolution", "YN", 6, None,
       ("Y", "takes ownership and resolves it in this call"),
       ("N", "pushes the caller elsewhere or to call back")),
    _i(17, "PCI-safe card handling", "YNNA", 4, "N",
       ("Y", "card data only through the secure keypad line, never read aloud"),
       ("N", "asks for or repeats the full card number or security code aloud"),
       ("NA", "no card payment in the call")),
    _i(18, "Required disclosures (promotions, auto-renew)", "YNNA", 6, None,
       ("Y", "states the terms of any promotion, plan or auto-renewal offered"),
       ("N", "offers a promotion or plan without its terms"),
       ("NA", "no promotion, plan or auto-renewal offered")),
    _i(19, "Relevant offer / loyalty", "YNNA", 5, None,
       ("Y", "makes a relevant offer when the caller opens the door"),
       ("N", "misses a clear opportunity the caller raised"),
       ("NA", "the caller declined offers up front")),
    _i(20, "Recap", "YN", 4, None,
       ("Y", "summarises what was agreed before closing"),
       ("N", "no summary")),
    _i(21, "Anything else?", "YN", 2, None,
       ("Y", "asks whether there is anything else"),
       ("N", "does not ask")),
    _i(22, "Proper close", "YN", 2, None,
       ("Y", "thanks the caller with the brand name and closes politely"),
       ("N", "abrupt or missing close")),
    _i(23, "Survey invitation", "YNNA", 2, None,
       ("Y", "invites the caller to the post-call survey"),
       ("N", "no survey invitation"),
       ("NA", "the call ended in a transfer")),
    _i(24, "Credit terms disclosure (APR, fees)", "YNNA", 5, None,
       ("Y", "states the APR and fees before a credit change is made"),
       ("N", "changes the credit line without stating APR and fees"),
       ("NA", "no credit change")),
    _i(25, "Billing-dispute rights explained", "YNNA", 5, None,
       ("Y", "explains provisional credit, the investigation time and that the disputed amount need not be paid"),
       ("N", "opens a dispute without explaining the caller's rights"),
       ("NA", "no dispute")),
    _i(26, "Consent before account changes", "YNNA", 4, "N",
       ("Y", "gets an explicit yes before changing the account"),
       ("N", "changes the account without asking"),
       ("NA", "no account change")),
)  # fmt: skip

RUBRIC_BY_ID: dict[int, RubricItem] = {item.id: item for item in MASTER_RUBRIC}


def rubric_for(ids: Iterable[int]) -> tuple[RubricItem, ...]:
    """The items with these ids, in the order given (callers validate ids at config load)."""
    return tuple(RUBRIC_BY_ID[i] for i in ids)


def item_value(item: RubricItem, score: Score) -> float | None:
    """Y=1, N=0, NA=None (excluded), 1–5 → (x−1)/4."""
    if score == "NA":
        return None
    if item.scale == "1-5":
        return (int(score) - 1) / 4
    return 1.0 if score == "Y" else 0.0


def is_autofail(item: RubricItem, score: Score, disclosure_required: bool) -> bool:
    """Whether this score fails an auto-fail item (`disclosure_required`: the account requires item 2)."""
    if item.autofail == "N":
        return score == "N"
    if item.autofail == "1":
        return score == 1 and not isinstance(score, bool)
    if item.autofail == "N_required":
        return disclosure_required and score == "N"
    return False


@dataclass(frozen=True, slots=True)
class CallScore:
    overall: float | None  # None when every item is NA (nothing to score)
    autofail: tuple[int, ...]  # ids of the failed auto-fail items
    passed: bool | None


def score_call(
    items: Iterable[RubricItem], scores: Mapping[int, Score], disclosure_required: bool, pass_threshold: float
) -> CallScore:
    """Apply the scoring rule. `scores` must hold a valid score for every item (callers validate)."""
    num = den = 0.0
    failed = []
    for item in items:
        s = scores[item.id]
        if is_autofail(item, s, disclosure_required):
            failed.append(item.id)
        v = item_value(item, s)
        if v is not None:
            num += item.weight * v
            den += item.weight
    if failed:
        return CallScore(0.0, tuple(failed), False)
    if den == 0:
        return CallScore(None, (), None)
    overall = 100.0 * num / den
    return CallScore(overall, (), overall >= pass_threshold)
