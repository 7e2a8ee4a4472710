"""What the synthetic calls say: names, products, and the lines each behaviour and intent is made of.

Pure data. Templates use ``{slot}`` fields filled per call (see `transcripts.call_slots`); a slot is never glued to a
letter or digit (``"{order}."`` yes, ``"x{order}"`` no), so a filled line's token count is the template's plus the
slots' (a unit test checks every template). Agent filler lines carry no courtesy words, questions or empathy: the
behaviour lines alone decide the scores.
"""

from __future__ import annotations

from dataclasses import dataclass

AGENT_NAMES = (
    "Priya", "Marcus", "Dana", "Luis", "Keisha", "Tom", "Aisha", "Kevin", "Rosa", "Jamal", "Erin", "Mateo", "Grace",
    "Omar", "Hannah", "Victor", "Naomi", "Derek", "Lena", "Andre", "Chloe", "Sam", "Imani", "Brett", "Yuki", "Carla",
)  # fmt: skip
FIRST_NAMES = (
    "Linda", "James", "Maria", "Robert", "Jennifer", "David", "Patricia", "Michael", "Susan", "Daniel", "Karen",
    "Joseph", "Nancy", "Carlos", "Lisa", "Anthony", "Betty", "Kwame", "Sandra", "Wei", "Ashley", "Ahmed", "Emily",
    "Brian", "Megan", "Raj", "Olivia", "Ethan", "Sofia", "Nathan", "Fatima", "Tyler", "Grace", "Diego", "Rachel",
    "Hiro", "Amanda", "Jorge", "Nicole", "Samuel",
)  # fmt: skip
LAST_NAMES = (
    "Johnson", "Garcia", "Smith", "Nguyen", "Patel", "Brown", "Martinez", "Okafor", "Kim", "Williams", "Lopez",
    "Davis", "Chen", "Wilson", "Anderson", "Thomas", "Moore", "Jackson", "Rivera", "Lee", "Harris", "Clark", "Lewis",
    "Walker", "Hall", "Young", "Khan", "Allen", "Wright", "Scott", "Torres", "Hill", "Adams", "Baker", "Nelson",
)  # fmt: skip
SPECIALISTS = ("Monica", "Ray", "Tanya", "Felix", "Gloria", "Ian", "Beatriz", "Curtis")
STREETS = (
    "Maple Court", "Oak Street", "Birch Lane", "Harbor Drive", "Elm Avenue", "Cedar Road", "Lakeview Terrace",
    "Sunset Boulevard", "Willow Way", "Park Place", "River Road", "Hillcrest Drive", "Pine Street", "Main Street",
)  # fmt: skip
EMAIL_DOMAINS = ("gmail.com", "yahoo.com", "outlook.com", "icloud.com", "hotmail.com")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October")
OCCASIONS = (
    "for the weekend", "before your trip", "for your daughter's birthday", "for the holidays", "for work on Monday",
    "for the move", "for guests this weekend", "as a gift",
)  # fmt: skip
CARRIERS = ("UPS", "FedEx", "the postal service", "our delivery partner")

PRODUCTS = {
    "electronics": (
        "laptop", "pair of wireless earbuds", "55-inch TV", "tablet", "gaming headset", "smartwatch", "soundbar",
        "robot vacuum", "external SSD", "27-inch monitor", "printer", "Wi-Fi router", "digital camera", "e-reader",
    ),
    "apparel": (
        "winter coat", "pair of jeans", "pair of running shoes", "wool sweater", "linen dress", "rain jacket",
        "pair of boots", "hoodie", "blazer", "swimsuit", "pair of chinos", "puffer vest",
    ),
    "grocery": (
        "dozen eggs", "gallon of milk", "strawberries", "chicken breasts", "loaf of sourdough", "Greek yogurt",
        "salmon fillets", "avocados", "box of cereal", "bag of apples", "orange juice", "ground beef",
    ),
    "furniture": (
        "sectional sofa", "dining table", "queen bed frame", "dresser", "bookcase", "recliner", "coffee table",
        "office chair", "nightstand", "sleeper sofa", "bar stool set", "TV stand",
    ),
    "beauty": (
        "spring box", "deluxe box", "skincare box", "fragrance sampler", "hair care box", "holiday box",
        "mini box", "clean beauty box",
    ),
    "card": (
        "Brightside Travel", "QuickFit Gym", "StreamMax", "Corner Market", "Atlas Airlines", "Northgate Hotel",
        "PixelPlay Games", "Sunrise Pharmacy", "Cityline Rideshare", "Harbor Grill",
    ),
}  # fmt: skip
ORDER_PREFIX = {"electronics": "VT", "apparel": "TL", "grocery": "GB", "furniture": "OH", "beauty": "LB", "card": "MR"}

# ---- openings -------------------------------------------------------------------------------------------------
IVR_DISCLOSURE = "Thank you for calling {brand}. This call may be recorded for quality and training purposes."
GREETING_YES = (
    "Thank you for calling {brand}, my name is {agent}.",
    "Thanks for calling {brand}, this is {agent}.",
    "Good afternoon, {brand}, you're speaking with {agent}.",
)
GREETING_NO = ("Hello.", "Yeah, hi.", "Customer service.", "Hi there.")
ASSIST_YES = (" How can I help you today?", " What can I do for you today?", " How may I help you?")
CUSTOMER_UNPROMPTED = ("Hi... hello? Okay, um, ", "Hello? Hi, so, ", "Hi, yes, ")
RECORDING_YES = (
    "Before we get started, just so you know, this call is recorded for quality and training.",
    "Just a heads-up that this call is being recorded for quality purposes.",
)

# ---- identity and details -------------------------------------------------------------------------------------
VERIFY_ASK = (
    "Before I pull up the account, can I get the email address on file and the billing ZIP code?",
    "I can help with that. First I need to verify the account: what's the email on file and your ZIP code?",
)
VERIFY_ANSWER = ("Sure, it's {email}, and the ZIP is {zip}.", "It's {email}. ZIP code {zip}.")
VERIFY_ASK_CARD = (
    "Before we go any further I need to verify you: can you give me the last four digits of the card and your date "
    "of birth?",
    "I can help. To verify the account, what are the last four digits of the card and your date of birth?",
)
VERIFY_ANSWER_CARD = ("{card_last4}, and my birthday is {dob}.", "Last four are {card_last4}. Date of birth {dob}.")
VERIFY_DONE = ("Thank you, {cust_first}, you're verified.", "Perfect, that matches, you're verified.")
VERIFY_SKIP_ASK = ("What's your name?", "Who am I speaking with?")
VERIFY_SKIP_DONE = (
    "Okay, I'll just go by the name, I found an account under {cust} and I can see everything on it.",
    "Alright, I pulled up an account under {cust_last}, no need for anything else, I see it all here.",
)
CONFIRM_ORDER = (
    "Just to confirm, that's order {order}, going to {street_no} {street}, correct?",
    "Let me read that back: order {order}, shipping address {street_no} {street}. Is that right?",
)
CONFIRM_CONTACT = (
    "And is the number ending in {phone_tail} still the best number to reach you?",
    "Let me confirm your contact details: the email {email} and the phone ending in {phone_tail}, correct?",
)
CONFIRM_YES = ("Yes, that's right.", "Yep, that's correct.", "That's it, yes.")
ORDER_GIVEN = ("The order number is {order}.", "I have the order number, it's {order}.")

# ---- soft skills ------------------------------------------------------------------------------------------------
# (what the caller says, the specific empathy a level-5 agent answers it with)
EMOTION = (
    ("Honestly, I'm really frustrated, this is the second time I've had to call about this.",
     "I'm really sorry you've had to call twice, {cust_first}. That's frustrating, and I'll make sure it's the last "
     "time."),
    ("I was counting on having it {occasion}, so this is really stressful.",
     "Oh no, I'm so sorry. I know you were counting on it {occasion}, that's really stressful."),
    ("This has been a nightmare, to be honest, I've wasted my whole morning on it.",
     "I'm sorry, nobody wants to lose a whole morning to this. Let's get it fixed properly."),
    ("I'm pretty upset, I've been a customer for years and this has never happened.",
     "I'm sorry, you've been with us for years and you deserve better than this."),
)  # fmt: skip
EMPATHY = {
    5: ("I can hear how much this has thrown off your day, I'm sorry.", "That's a real hassle, I'm sorry it happened."),
    4: ("I'm sorry about that.", "I'm sorry for the trouble with this."),
    3: ("Okay, that's unfortunate.", "Hm, okay."),
    2: ("Okay. Let's keep going.", "Right. Moving on."),
    1: ("Well, these things happen, it's not a big deal.", "Everybody says that, honestly. It's just a delivery."),
}
LAPSE = (
    ("Sorry, what was the order number again?", "I just gave it to you. It's {order}."),
    ("Wait, which item was this about?", "The {product}, like I said."),
    ("Sorry, can you repeat what the problem was?", "I already explained it. It's the {product}, like I said."),
)
INTERRUPT = (
    ("And the other thing is, when I opened the box the—", "Yeah, yeah, okay, I get it, let me stop you there."),
    ("Can I just finish what I was—", "Okay, okay, I know, I've got enough."),
)
MISSTATE = (
    ("So you want to cancel the whole order?", "No, that's not what I said at all."),
    ("So this is about a billing problem?", "No. It's about the {product}, I said that twice."),
)
COURTESY = {
    5: (
        "Thank you so much for your patience, {cust_first}.",
        "I really appreciate you bearing with me, please give me just a moment.",
        "Thank you, I appreciate you walking me through that.",
    ),
    4: ("Thanks for that.", "Please give me one moment."),
    2: ("Like I said, I need you to answer the question first.", "As I already explained, that's just how it is."),
    1: (
        "Look, that's not my problem.",
        "If you'd listened the first time we wouldn't be going in circles.",
        "I don't have all day for this.",
    ),
}
PUSHBACK = (
    "But the last person told me something different.",
    "Can you just explain it again?",
    "I don't understand why this is so complicated.",
)
GENERIC_PROBE = (("Is that everything?", "I mean, yes, that's the main thing."),)
ASSUME = (
    "Okay, I know what this is, I'll just put something through.",
    "Sounds like the usual thing, I'll do something.",
)
PARAPHRASE = (
    "So if I understand correctly, {issue}, and you'd like {want}. Is that right?",
    "Let me make sure I have this right: {issue}, and what you need is {want}?",
)
PARAPHRASE_ACK = ("Yes, exactly.", "That's it, yes.", "Right, that's what I need.")

# ---- hold, transfer, card data, consent -------------------------------------------------------------------------
HOLD_ASK = (
    "Would it be alright if I put you on a brief hold while I check with {team}? It should be about two minutes.",
    "Can I place you on a short hold, about two minutes, while I confirm this with {team}?",
)
HOLD_OK = ("Sure, go ahead.", "Yeah, that's fine.")
HOLD_BACK_YES = ("Thank you so much for holding, {cust_first}.", "Thanks for holding, I appreciate your patience.")
HOLD_NO = ("Hold on.", "Hang on a sec.")
HOLD_BACK_NO = ("Okay.", "Alright, I'm back.")
TRANSFER_WARM = (
    "For this part I'm going to bring in {team}. I'll stay on the line and explain everything so you don't have to "
    "repeat yourself.",
)
TRANSFER_BRIEF = "Hi {specialist}, I have {cust} on the line: {issue}. The account is verified and the notes are in."
TRANSFER_SPECIALIST = ("{team_cap}, this is {specialist}.", "Thanks, {agent}. I'll take it from here.")
TRANSFER_COLD = ("You'll need to talk to {team} for that. Transferring you now.", "That's {team}. I'll send you over.")
PCI_SAFE = (
    "For your security I'm transferring you to our secure payment line: you'll enter the card number on your keypad, "
    "and I'll never ask you to read it out. I'll stay on the line.",
    "Please don't read the card number out loud. I'm starting the secure keypad line now; type the card number, "
    "expiration and security code on your phone.",
)
PCI_SAFE_DONE = "Got it, the card ending in {new_last4} went through on the secure line."
PCI_UNSAFE = (
    "Go ahead and read me the full card number, the expiration date and the three-digit code on the back.",
    "I'll take the card now. What's the full number and the security code?",
)
PCI_UNSAFE_CUSTOMER = "Okay, it's [card number redacted], it expires {exp}, and the code is [security code redacted]."
PCI_UNSAFE_READBACK = (
    "Let me read that back: [card number redacted], code [security code redacted]. Okay, that went through."
)
CONSENT_ASK = ("Do I have your permission to {change}?", "Before I do that: is it okay with you if I {change}?")
CONSENT_YES = ("Yes, go ahead.", "Yes, please do.")
CONSENT_SKIP = ("Okay, I've gone ahead and {changed}.", "Alright, I already {changed} while we were talking.")
CREDIT_TERMS = (
    "Before I submit that: the purchase APR on the card is {apr}, and a late payment can add a fee of up to "
    "{late_fee}.",
)
DISPUTE_RIGHTS = (
    "While we investigate, you don't have to pay the disputed {amount}. You'll see a provisional credit within "
    "{provisional_credit_days} business days, and we'll send you the outcome in writing within "
    "{investigation_days} days.",
)

# ---- offers -----------------------------------------------------------------------------------------------------
OFFER_OPTOUT = ("And please, no offers or upgrades today, I just want this sorted.", "I don't want any sales pitch.")
OFFER_CUE = {
    "electronics": "I'm honestly worried the next one breaks too, and I'll need a case for it anyway.",
    "apparel": "I actually shop with you guys all the time.",
    "grocery": "The delivery fees really add up, I order every single week.",
    "furniture": "We have a dog, so I'm always worried about the fabric.",
    "beauty": "I do like the products, it's just a lot of money every month.",
    "card": "I'm thinking about buying a new couch with the card next month.",
}
OFFER = {
    "electronics": "Since you mentioned that, our two-year protection plan for the {product} is $79 and covers drops.",
    "apparel": "Since you shop with us so often, I can add 500 rewards points to your account, that's $10 off.",
    "grocery": "You might like our delivery pass: the first 30 days are free and delivery fees are waived.",
    "furniture": "We have a fabric protection plan that covers stains and spills for $89.",
    "beauty": "I can switch you to the mini box at half price for the next three months instead of cancelling.",
    "card": "For purchases over $299 we have a six-month zero-percent promotional financing offer.",
}
OFFER_TERMS = {
    "electronics": "The plan renews yearly at $79 unless you cancel, and you can cancel within 30 days for a full "
    "refund.",
    "apparel": "The points expire in 12 months and can't be combined with other promotions.",
    "grocery": "After the free 30 days it renews at $12.99 a month unless you cancel in the app.",
    "furniture": "It's a one-time charge, it lasts five years, and it doesn't cover pet damage.",
    "beauty": "After the three months it renews automatically at $39 a month until you cancel before the renewal date.",
    "card": "If the balance isn't paid in full within six months, interest is charged from the purchase date at the "
    "standard APR.",
}
OFFER_REPLY = ("Oh, okay, sure, go ahead and add that.", "Hm, maybe. Go ahead.", "Okay, that actually sounds good.")

# ---- closing ----------------------------------------------------------------------------------------------------
OWN_YES = ("I'm going to take care of this for you myself, right now.", "I'll own this one, let me fix it now.")
RECAP = ("So to recap: {recap}.", "Just to summarise what we did today: {recap}.")
# When the agent did not really run the process (levels 1-3), recap and next steps can only be about the note.
RECAP_WEAK = "you called because {issue}, and I've put a note on the account"
EXPECT_WEAK = "You'll get an email summary of this call within the hour, and the note stays on your account."
ANYTHING_ELSE = ("Is there anything else I can help you with today?", "Anything else I can do for you?")
ANYTHING_ELSE_TRANSFER = "Before I transfer you, is there anything else I can help you with?"
ANYTHING_ELSE_NO = ("No, that's everything, thanks.", "No, that's it.")
CLOSE_YES = (
    "Thank you for calling {brand}, {cust_first}. Have a great rest of your day.",
    "Thanks for calling {brand}, {cust_first}, take care.",
)
CLOSE_NO = ("Okay, bye.", "Alright.")
CLOSE_CUSTOMER = ("Thanks, bye.", "Bye.", "Okay, thank you, bye.")
SURVEY = (
    "You might get a short survey after this call, we'd really appreciate your feedback.",
    "After we hang up there's a two-question survey, if you have a moment for it.",
)

# ---- filler: neutral, score-free talk that makes a call as long as it really was ---------------------------------
AGENT_NEUTRAL = (
    "Okay.", "Alright, let me take a look.", "One second, the system is loading.", "Okay, I'm pulling that up now.",
    "Mm-hm.", "Bear with me, this screen is slow today.", "Okay, I see it here.",
    "Let me just make a note of that.", "Alright, I'm adding notes to the account.", "Okay, still loading.",
    "I'm just checking one more thing.", "Right.", "Okay, it's coming up now.", "Let me scroll down here.",
    "I see the history on this.", "Okay, the notes from last time are here too.", "Mm-hm, okay.",
)  # fmt: skip
CUSTOMER_SMALLTALK = (
    "Sorry, my dog is barking in the background.", "I'm calling from my car, so let me know if I cut out.",
    "I've been on hold for a while before this, just so you know.", "I tried the chat on the website first.",
    "My husband usually handles this stuff, but he's at work.", "I wrote everything down this time.",
    "The app kept logging me out, that's why I'm calling.", "I'm on my lunch break, so I don't have long.",
    "Okay, I'm looking at the email right now.", "It's been a long week, honestly.",
    "Hold on, let me find my glasses.", "My kids are home, sorry about the noise.",
    "Sorry, I had to step outside, it's loud in here.", "I'm writing this all down, by the way.",
    "My phone's at ten percent, so hopefully this is quick.", "I've been meaning to call for days.",
    "I had the email open somewhere, hold on.", "I didn't expect to get someone so quickly, honestly.",
    "My neighbour had the same thing happen last month.", "The website was down when I tried last night.",
)  # fmt: skip
# Combinatorial talk for long calls, once the fixed lines are used up (so a 20-minute call does not loop).
NARRATIVE_WHEN = ("On {weekday}", "Last week", "Yesterday", "This morning", "A few days ago", "Over the weekend")
NARRATIVE_DID = (
    "I checked the website again", "I got another email from you", "I tried the chat", "I called the number on the "
    "receipt", "I looked through my emails", "I asked my partner to check the account", "I logged into the app",
    "I went back to the confirmation page", "I checked my bank statement", "I read the help pages",
)  # fmt: skip
NARRATIVE_OUTCOME = (
    "and nobody could tell me anything", "and it just kept loading", "and I got a different answer",
    "and it said someone would call me back", "and nothing had changed", "and it didn't say anything useful",
)  # fmt: skip
SYSTEM_THING = (
    "account notes", "case history", "payment records", "contact history", "email log", "callback queue",
    "account activity", "previous tickets", "internal notes", "escalation log",
)  # fmt: skip
SYSTEM_STATE = (
    "I'm going through the {thing} now.", "I've got the {thing} up on my screen.", "Okay, I've got the {thing} open.",
    "I'm scrolling through the {thing}.", "Let me check the {thing} as well.",
)  # fmt: skip
CUSTOMER_WAIT = ("Okay, take your time.", "Sure.", "Okay.", "No rush.", "Alright.")
GENERIC_FILLER = (
    ("I'm updating the notes on the account now.", "Okay, take your time."),
    ("The system wants me to fill in a couple of fields here.", "No problem."),
    ("I'm adding a note so anyone you speak to next sees all of this.", "That would help, yes."),
    ("Okay, it's asking me to refresh the page.", "Computers, right."),
    ("I'm just typing this up.", "Sure, I'll wait."),
    ("Okay, I'm back on the main screen.", "Okay."),
    ("It looks like there were two notes from earlier this month.", "That was me calling before, I think."),
    ("I'm copying the reference into the case.", "Okay."),
    ("The page is taking a second to save.", "That's fine."),
    ("I can see the emails we sent you on my side.", "I think some went to spam."),
)


@dataclass(frozen=True, slots=True)
class IntentText:
    """The lines one call reason is made of. `steps` are the correct process in order; `vague`, `wrong`, `refuse`
    are process levels 3, 2 and 1. `issue`/`want`/`recap` are clauses used inside the shared templates above."""

    opening: tuple[str, ...]
    details: tuple[str, ...]
    probes: tuple[tuple[str, str], ...]
    issue: str
    want: str
    steps: tuple[str, str, str]
    vague: str
    wrong: str
    refuse: str
    expect: str
    recap: str
    own_no: str
    reflect: tuple[str, str]  # active listening at level 5: the agent reflects what the caller said
    team: str
    topic: str  # which policy statement applies (POLICY)
    needs_account: bool = True
    has_order: bool = True
    card_payment: float = 0.0  # probability the call takes a card payment
    change: str | None = None  # an account change needing consent: (ask phrase, done phrase)
    changed: str | None = None
    credit_change: bool = False
    dispute: bool = False
    has_item: bool = False  # the caller has the product in hand (troubleshooting talk fits)


INTENTS: dict[str, IntentText] = {
    "order_status": IntentText(
        opening=("I'm calling about my order, the {product}. It was supposed to be here by {weekday} and the "
                 "tracking hasn't moved in days.",
                 "I ordered {a_product} on {order_date} and I still don't have it."),
        details=("The tracking just says 'label created' and nothing since.",
                 "I checked with my neighbours in case it got left there, nothing.",
                 "It said out for delivery on {weekday} and then it just went back to in transit.",
                 "I took the day off work to be home for it.",
                 "I got an email saying it shipped, but the link doesn't work."),
        probes=(("When did you last see an update on the tracking?", "{weekday}, I think. Nothing since."),
                ("Did you get a shipping confirmation email with a carrier name?", "Yes, it said {carrier}."),
                ("Is the delivery address on the order your current address?", "Yes, same as always."),
                ("Has anyone else at the address received packages this week?", "My roommate got one yesterday.")),
        issue="your {product} from order {order} hasn't arrived and the tracking stopped updating",
        want="to know where it is or get it re-sent",
        steps=("I've opened a trace with {carrier}, reference {rma}.",
               "If the trace doesn't find it in two days, I'll ship a replacement at no charge.",
               "I've also flagged the order so you get tracking updates by text."),
        vague="I'll put a note on it and it'll probably show up.",
        wrong="You'll need to contact {carrier} yourself and open a claim with them.",
        refuse="There's nothing I can do until it's been a full month.",
        expect="You'll hear from us within two business days with the trace result, by email and text.",
        recap="I opened trace {rma} with {carrier}, and if it's not found in two days a replacement ships free",
        own_no="You'll have to call back in a few days, maybe it'll have moved by then.",
        reflect=('Got it, so the {product} from order {order} never showed up.',
                 "Okay, so you're still waiting on the {product}, and the tracking isn't telling you anything."),
        team="the shipping team", topic="delivery", card_payment=0.0),
    "return": IntentText(
        opening=("I want to return {a_product} I bought on {order_date}, it's just not what I expected.",
                 "Hi, I need to send back the {product}, it doesn't work for me."),
        details=("I only used it once, it's basically new.", "I still have the box and everything that came in it.",
                 "The colour looks completely different from the website.",
                 "My sister bought the same one and hers is fine, mine just isn't right for me.",
                 "I don't have a printer, if that matters for the label."),
        probes=(("Has the {product} been opened or used?", "Opened, but I barely used it."),
                ("Do you still have the original packaging and everything that came with it?", "Yes, all of it."),
                ("Would you prefer a refund or an exchange for a different one?", "A refund, please."),
                ("What made it not work out, so I can note it?", "It's just not what the pictures showed.")),
        issue="you'd like to return the {product} from order {order} because it isn't what you expected",
        want="a refund to your original payment",
        steps=("I've created a return authorisation, RMA number {rma}.",
               "I'm emailing a prepaid return label to {email}.",
               "Once the carrier scans the package, I'll release the refund to your original payment."),
        vague="Just ship it back to us and the refund should happen at some point.",
        wrong="You'll have to take it to one of our stores, we don't do returns by mail.",
        refuse="I can't process a return on this, sorry, it's been opened.",
        expect="The label will be in your inbox within the hour, and the refund posts {refund_days} business days "
               "after we receive it.",
        recap="I created RMA {rma}, emailed the prepaid label, and your refund is released once it's scanned",
        own_no="You'll need to send an email to the returns department, they handle that.",
        reflect=("Got it, so the {product} from order {order} just isn't right for you.",
                 'Okay, so you want to send the {product} back.'),
        has_item=True,
        team="the returns team", topic="returns", card_payment=0.0),
    "refund": IntentText(
        opening=("I returned the {product} two weeks ago and I still haven't seen my refund.",
                 "I'm calling about a refund for the {product}, it still hasn't come through."),
        details=("The return was delivered to your warehouse, I have the tracking.",
                 "My bank says nothing is pending.", "It was {amount}, so it's not nothing.",
                 "The email said the return was received, that was ten days ago.",
                 "I paid with my debit card if that makes a difference."),
        probes=(("Do you have the return tracking number handy?", "Yes, it shows delivered on {order_date}."),
                ("Which card or payment did you use for the original order?", "My debit card ending {card_last4}."),
                ("Was the refund amount you expected the full {amount}?", "Yes, the full amount.")),
        issue="your refund of {amount} for the returned {product} hasn't arrived",
        want="the refund processed",
        steps=("I see the return was received, so I'm releasing the refund of {amount} now.",
               "The refund reference is {rma}.",
               "I've sent you a confirmation email with that reference."),
        vague="I'll ask someone to look at it, it should come through eventually.",
        wrong="You'll need to ask your bank to reverse the charge instead.",
        refuse="Refunds aren't something I can touch, sorry.",
        expect="You'll get the confirmation email in a few minutes, and the money shows in your account within "
               "{refund_days} business days.",
        recap="I released the {amount} refund, reference {rma}, and emailed you the confirmation",
        own_no="Call back next week if it still hasn't come through.",
        reflect=("Got it, so you sent the {product} back and the refund still hasn't landed.",
                 "Okay, so it's the money for the {product} you're after."),
        team="the billing team", topic="returns", card_payment=0.0),
    "damaged_item": IntentText(
        opening=("My {product} arrived damaged. The box was crushed and the {product} is broken.",
                 "I just got my order and the {product} came in damaged, I'm really not happy."),
        details=("The box looked like it had been dropped from a truck.", "I took pictures as soon as I opened it.",
                 "There's a big crack right across the front.", "The delivery driver just left it at the door.",
                 "I haven't thrown anything away, it's all still in the hallway."),
        probes=(("When did it arrive?", "Yesterday afternoon."),
                ("Was the outside of the box damaged too, or just the item?", "The box was crushed on one corner."),
                ("Do you have photos of the damage?", "Yes, I took a bunch."),
                ("Is it completely unusable, or just cosmetic?", "It doesn't work at all.")),
        issue="your {product} arrived damaged from order {order}",
        want="a replacement",
        steps=("I've logged the damage claim, reference {rma}, with your photos attached.",
               "I'm shipping a replacement {product} today at no charge.",
               "The carrier will pick up the damaged one when they drop off the new one."),
        vague="I'll send something out once I hear back, probably.",
        wrong="You'll need to file a claim with {carrier} yourself, they damaged it.",
        refuse="Once it's delivered it's not our responsibility.",
        expect="The replacement ships today and should arrive in {delivery_days} business days; you'll get "
               "tracking by email tonight.",
        recap="I logged damage claim {rma}, a replacement ships today, and the carrier collects the damaged one",
        own_no="You'll have to call the carrier about damage, we can't do anything from here.",
        reflect=('Got it, so the {product} from order {order} came in broken.',
                 'Okay, so the {product} was damaged when it arrived.'),
        has_item=True,
        team="the claims team", topic="damage", card_payment=0.0),
    "warranty": IntentText(
        opening=("My {product} stopped working after about eight months, and I think it's under warranty.",
                 "I have {a_product} from you that's just died, I want to use the warranty."),
        details=("It just won't turn on anymore.", "I never dropped it or anything, it just stopped.",
                 "I've already tried a different outlet.", "It started making a weird clicking noise last week.",
                 "I registered it when I bought it, I think."),
        probes=(("When did you buy it?", "On {order_date} last year."),
                ("Has it been dropped or had any liquid on it?", "No, never."),
                ("What exactly happens when you try to use it?", "Nothing, no lights, nothing."),
                ("Have you tried a reset or a different power source?", "Yes, both. Nothing.")),
        issue="your {product} stopped working within the warranty period",
        want="a warranty repair or replacement",
        steps=("I've opened warranty claim {rma} for the {product}.",
               "I'm emailing a prepaid shipping label so you can send it to our repair centre.",
               "Once they confirm the fault, they'll repair it or send a replacement."),
        vague="I'll note it down and someone might get back to you about the warranty.",
        wrong="Warranty claims go through the manufacturer, you'll need to call them.",
        refuse="We don't do anything once you've had it this long.",
        expect="The label arrives by email today, and repairs take about ten business days once we receive it.",
        recap="I opened warranty claim {rma}, you'll get a shipping label today, and the repair centre takes it "
              "from there",
        own_no="You'll have to contact the manufacturer directly about that.",
        reflect=('Got it, so the {product} just stopped working on you.',
                 'Okay, so the {product} failed and you want the warranty to cover it.'),
        has_item=True,
        team="the warranty team", topic="warranty", card_payment=0.0),
    "exchange": IntentText(
        opening=("I need to exchange the {product}, it's the wrong size.",
                 "Can I swap the {product} I got for a different one? It doesn't fit right."),
        details=("I usually wear a medium but this runs small.", "I want the same thing, just one size up.",
                 "It's for an event on {weekday}, so I'm hoping it's quick.",
                 "The one I want is showing in stock on the website.", "I haven't worn it, the tags are on."),
        probes=(("Which size or model would you like instead?", "One size up, please."),
                ("Are the tags still on and has it been used?", "Tags are on, never used."),
                ("Do you need it by a certain date?", "By {weekday} if possible.")),
        issue="the {product} doesn't fit and you want to exchange it for a different size",
        want="the exchange shipped quickly",
        steps=("I've reserved the new {product} and created exchange {rma}.",
               "I'm emailing you a prepaid label for the one you have.",
               "The new one ships as soon as the label is scanned, no extra charge."),
        vague="Just send the old one back and we'll sort out the new one at some point.",
        wrong="You'll need to return it and place a brand-new order yourself.",
        refuse="We don't do exchanges, sorry.",
        expect="You'll get the label within the hour, and the new one arrives {delivery_days} business days "
               "after we scan the return.",
        recap="I reserved the new {product} under exchange {rma}, emailed the label, and it ships when the return is "
              "scanned",
        own_no="You'd need to go to a store for an exchange.",
        reflect=("Got it, so the {product} doesn't fit and you want a different size.",
                 'Okay, same {product}, just a size that fits.'),
        has_item=True,
        team="the exchanges team", topic="returns", card_payment=0.3),
    "product_question": IntentText(
        opening=("I'm thinking of buying {a_product} and I have a question about it before I order.",
                 "Quick question about the {product} on your website."),
        details=("I want to use it for work, mostly video calls.", "My old one lasted five years.",
                 "I'm comparing it with one from another store.", "The reviews say the battery is great.",
                 "I'm not very technical, so I just want something that works."),
        probes=(("What will you mainly use it for?", "Mostly work, some streaming."),
                ("Is there anything you didn't like about your current one?", "It's slow and the battery's gone."),
                ("Do you need it by a particular date?", "Not really.")),
        issue="you'd like to know whether the {product} fits what you need before you buy it",
        want="a recommendation",
        steps=("Based on what you said, the model on the product page fits, and I've emailed you the spec sheet.",
               "I've added a note with the comparison to your quote, reference {rma}.",
               "The price is held for you for seven days."),
        vague="It should probably be fine, I think.",
        wrong="You'd have to go to a store to ask about specs, we can't see them here.",
        refuse="I can't answer product questions.",
        expect="The spec sheet is in your email now, and the price hold lasts seven days.",
        recap="I sent the spec sheet, saved quote {rma}, and the price is held for seven days",
        own_no="You could check online forums, they might know.",
        reflect=('Got it, so you want to be sure about the {product} before you order.',
                 "Okay, so it's a question about the {product}, not an order yet."),
        team="the product specialists", topic="warranty", needs_account=False, has_order=False, card_payment=0.1),
    "missing_item": IntentText(
        opening=("My delivery came today but the {product} wasn't in the bags.",
                 "I'm missing things from my grocery order, the {product} never showed up."),
        details=("Everything else was there, just not that.", "The receipt says it was packed.",
                 "I needed it for dinner tonight.", "It's happened before, a few weeks ago.",
                 "The driver was in a hurry and just left the bags."),
        probes=(("Was it listed on the receipt in the bags?", "Yes, it's on the receipt."),
                ("Were there any substitutions noted on the order?", "No, none."),
                ("Is anything else missing or damaged?", "No, just that.")),
        issue="the {product} was charged but missing from today's delivery",
        want="a credit for the missing item",
        steps=("I've marked the {product} as missing on order {order}.",
               "I've credited {amount} back to your original payment.",
               "I've added a note for the store that packed it, reference {rma}."),
        vague="I'll pass it on and you'll maybe see a credit.",
        wrong="You'll need to go to the store with your receipt to get that back.",
        refuse="Once the order's delivered we can't change anything.",
        expect="The {amount} credit shows on your card within {refund_days} business days, and you'll get an email "
               "confirmation now.",
        recap="I marked the {product} missing, credited {amount}, and logged it with the store under {rma}",
        own_no="You'll need to contact the store directly about missing items.",
        reflect=('Got it, so the {product} was on the order but not in the bags.',
                 'Okay, so everything came except the {product}.'),
        team="the store team", topic="damage", card_payment=0.0),
    "delivery_scheduling": IntentText(
        opening=("I need to reschedule the delivery for my {product}, I won't be home on {weekday}.",
                 "Can I change the delivery date for the {product}? Something came up."),
        details=("It's a two-person delivery, right? They bring it inside?", "We're on the third floor, no elevator.",
                 "Weekends are best for us.", "I need someone home to sign, I assume.",
                 "The old one needs to be taken away too, if possible."),
        probes=(("What days work better for you?", "Saturday or the following Tuesday."),
                ("Is there anything about access we should know, stairs or parking?", "Third floor, no elevator."),
                ("Do you want us to take the old one away?", "Yes, please.")),
        issue="you need to move the delivery of your {product} because you won't be home on {weekday}",
        want="a new delivery date",
        steps=("I've moved the delivery to Saturday, morning window.",
               "I've added the stairs and the haul-away to the delivery notes.",
               "The confirmation number for the new slot is {rma}."),
        vague="I'll try to move it, someone will call you with a date maybe.",
        wrong="You'll have to cancel the order and re-order it for a new date.",
        refuse="Delivery dates can't be changed.",
        expect="You'll get a text the day before with a two-hour window, and the crew calls 30 minutes before "
               "arriving.",
        recap="your delivery is moved to Saturday morning, stairs and haul-away are noted, confirmation {rma}",
        own_no="You'll have to call the delivery company yourself to change that.",
        reflect=("Got it, so the current date doesn't work and you need another day for the {product}.",
                 "Okay, so it's a new delivery date for the {product}."),
        team="the delivery team", topic="delivery", card_payment=0.0),
    "subscription_cancel": IntentText(
        opening=("I want to cancel my subscription, please.",
                 "Hi, I'm calling to cancel the monthly box."),
        details=("I just don't use all the products.", "Money's a bit tight right now.",
                 "I've got a drawer full of things I haven't opened.", "I tried to cancel online but couldn't find it.",
                 "The {product} last month was nice, but it's too much."),
        probes=(("Can I ask what's making you want to cancel?", "It's just too much stuff every month."),
                ("Would skipping a month or two help instead?", "Not really, I want to stop."),
                ("Was there anything wrong with a recent box?", "No, it's just too much.")),
        issue="you want to cancel the subscription because you don't use everything",
        want="the subscription cancelled",
        steps=("I've cancelled the subscription effective today.",
               "Your cancellation confirmation number is {rma}.",
               "I've turned off the renewal, so no further boxes will ship."),
        vague="I'll put in a request to cancel and it should go through.",
        wrong="You'll need to cancel through the app yourself, I can't do it here.",
        refuse="I can't cancel subscriptions over the phone.",
        expect="You'll get a cancellation email within the hour, and there are no more charges after today.",
        recap="your subscription is cancelled, confirmation {rma}, and no more boxes or charges",
        own_no="Try the app, you'll have to cancel it there.",
        reflect=('Got it, so you want to stop the subscription.',
                 "Okay, so it's a cancellation you're after, not a change."),
        team="the membership team", topic="subscription", card_payment=0.0),
    "payment_update": IntentText(
        opening=("The card I pay with expired, and I need to put the new one on the account.",
                 "I need to update my payment method, my old card was replaced."),
        details=("The bank sent me a new card last week.", "I don't want the payment to bounce.",
                 "It's the same bank, just a new number.", "I got an email that the payment failed.",
                 "I'd like to set it up so I don't have to think about it."),
        probes=(("Is this replacing the old card completely?", "Yes, the old one is cancelled."),
                ("Did a payment already fail on the old card?", "Yes, the email said so."),
                ("Do you want this as the default for future payments?", "Yes, please.")),
        issue="your card on file expired and you need the new one added",
        want="the new card set up for payments",
        steps=("I've removed the expired card from the account.",
               "The new card is saved as your default payment method.",
               "I've retried the failed payment, reference {rma}."),
        vague="I'll update something and it should be fine.",
        wrong="You'll need to add the card in the app, I can't take it here.",
        refuse="We can't update cards over the phone.",
        expect="You'll get an email confirmation in a few minutes, and the next payment uses the new card.",
        recap="the expired card is removed, the new one is your default, and the failed payment was retried under "
              "{rma}",
        own_no="You'll have to update that online yourself.",
        reflect=('Got it, so the old card expired and the new one needs to go on the account.',
                 "Okay, so it's just swapping in the new card."),
        team="the billing team", topic="subscription", has_order=False, card_payment=1.0,
        change="set the new card as your default payment method", changed="set the new card as the default"),
    "card_dispute": IntentText(
        opening=("There's a charge on my card from {product} that I don't recognise, {amount}.",
                 "I want to dispute a charge from {product}, I never got what I paid for."),
        details=("I've never even heard of them.", "I called {product} and they won't call me back.",
                 "It posted on {order_date}.", "I still have the card, it wasn't stolen.",
                 "My statement closes next week, so I'm worried about paying it."),
        probes=(("When did the charge post?", "On {order_date}."),
                ("Have you contacted {product} about it?", "Yes, twice, no answer."),
                ("Do you still have the card in your possession?", "Yes, it's in my wallet."),
                ("Did anyone else have access to the card?", "No, nobody.")),
        issue="you're disputing a {amount} charge from {product}",
        want="the charge disputed",
        steps=("I've opened dispute case {rma} for the {amount} charge.",
               "I've attached your notes about contacting the merchant.",
               "I've flagged the card for monitoring in case there are more charges."),
        vague="I'll note the dispute and they'll look at it at some point.",
        wrong="You need to get the refund from the merchant, we can't dispute it.",
        refuse="You made the purchase, so you have to pay it.",
        expect="You'll get a letter and an email confirming case {rma} within two business days.",
        recap="I opened dispute {rma} for {amount}, attached your notes, and the card is being monitored",
        own_no="Call back once you've got a refund refused in writing from the merchant.",
        reflect=("Got it, so it's the {amount} charge from {product}.",
                 "Okay, so the {product} charge for {amount} is the one you're disputing."),
        team="the disputes team", topic="dispute", has_order=False, dispute=True),
    "balance_inquiry": IntentText(
        opening=("I want to check my balance and when my payment is due.",
                 "Can you tell me my balance and the minimum payment?"),
        details=("I think I missed a payment last month.", "The statement in the app looks wrong.",
                 "I want to pay it off this month.", "I'm trying to avoid interest.",
                 "I want to make a payment today too."),
        probes=(("Are you looking for the statement balance or today's balance?", "Whatever I need to pay."),
                ("Did you want to make a payment today?", "Yes, if I can."),
                ("Are you set up on autopay at the moment?", "No, I pay manually.")),
        issue="you want your balance and due date, and to pay today",
        want="the balance details and a payment",
        steps=("Your statement balance is {amount}, due on the {due_day}.",
               "I've scheduled a payment of {amount} for today, confirmation {rma}.",
               "That pays the statement in full, so there's no interest this cycle."),
        vague="The balance is somewhere around {amount}, I think.",
        wrong="You can only check your balance in the app.",
        refuse="I can't give out balance information.",
        expect="The payment posts within one business day, and the app updates tomorrow.",
        recap="your statement balance is {amount}, and today's payment is confirmed under {rma}",
        own_no="You'll have to check the app for that.",
        reflect=('Got it, so you want the balance and the due date.',
                 "Okay, so it's the balance and the payment date you need."),
        team="the payments team", topic="credit", has_order=False, card_payment=0.5),
    "credit_limit": IntentText(
        opening=("I'd like to ask for a credit limit increase.",
                 "Can I get my credit limit raised? I have a big purchase coming up."),
        details=("I've had the card for three years.", "I always pay on time.", "My income went up this year.",
                 "It's for furniture, so it's a few thousand.", "I don't want to open another card."),
        probes=(("How much of an increase are you looking for?", "Maybe two thousand more."),
                ("Has your annual income changed since you opened the card?", "Yes, it went up."),
                ("Is this for a specific purchase?", "Yes, new furniture.")),
        issue="you'd like your credit limit raised for an upcoming purchase",
        want="a higher limit",
        steps=("I've run the review with a soft inquiry, so your credit score isn't affected.",
               "You're approved for a new limit of {limit}.",
               "The change reference is {rma}."),
        vague="I'll put in a request and you might get more.",
        wrong="You'll need to apply for a new card to get a higher limit.",
        refuse="We don't do limit increases.",
        expect="The new limit is live within the hour, and a confirmation letter arrives in 7 to 10 days.",
        recap="your limit goes to {limit}, reference {rma}, with no effect on your credit score",
        own_no="Try applying online, they'll decide.",
        reflect=("Got it, so you're after a higher limit.",
                 "Okay, so it's a limit increase you need."),
        team="the credit team", topic="credit", has_order=False, credit_change=True,
        change="raise your credit limit to {limit}", changed="raised your credit limit to {limit}"),
    "lost_card": IntentText(
        opening=("I lost my card, I think I left it at a restaurant.",
                 "My card is missing, I need to lock it and get a new one."),
        details=("I last used it on {weekday} at dinner.", "I called the restaurant, they don't have it.",
                 "I don't see any weird charges yet.", "I have a trip next week, so I need the new one fast.",
                 "I've got bills set up on that card."),
        probes=(("When and where did you last use it?", "{weekday} night, at Harbor Grill."),
                ("Do you see any charges you don't recognise?", "No, not yet."),
                ("Do you need the new card sent to the address on file?", "Yes, same address.")),
        issue="your card is lost and you need it locked and replaced",
        want="the card locked and a replacement",
        steps=("I've locked the old card so nobody can use it.",
               "I've ordered a replacement with a new number, reference {rma}.",
               "Your recurring bills will move to the new number automatically."),
        vague="I'll lock something and a card should come.",
        wrong="You need to file a police report first, then call back.",
        refuse="We can't replace cards over the phone.",
        expect="The new card arrives in 5 to 7 business days, and you'll get a text when it ships.",
        recap="the old card is locked, replacement {rma} is on the way, and your bills move to the new number",
        own_no="You'll have to go to a branch for a new card.",
        reflect=('Got it, so the card is missing and you want it locked.',
                 'Okay, so the card is gone and you need a new one.'),
        team="the card services team", topic="credit", has_order=False,
        change="close the old card and send a replacement to {street_no} {street}",
        changed="closed the old card and ordered a replacement to {street_no} {street}"),
}  # fmt: skip

# Policy statements by accuracy level (rubric item 13); 5 = as in the account's policy reference.
POLICY: dict[str, dict[int, str]] = {
    "returns": {
        5: "You're within our {return_days}-day return window; it needs to come back {return_condition}, and the "
           "refund goes to your original payment within {refund_days} business days. Also, {restocking_fee}.",
        4: "You're within the {return_days}-day return window, so we can take it back and refund your original "
           "payment.",
        3: "I think returns are around {near_days} days, and the refund shows up in a week or two, more or less.",
        2: "Returns are {far_days} days, and we can only give you store credit for it, not a refund to your card.",
        1: "Honestly, you can send anything back whenever you want, no conditions, and I'll get you cash back today.",
    },
    "damage": {
        5: "Damage or missing items have to be reported within {report_hours} hours of delivery, which you did, so "
           "you're covered for a free replacement or a full refund.",
        4: "Since you reported it right away, you're covered for a replacement or a refund.",
        3: "I think you have maybe a week or so to report these things, and then we can probably do something.",
        2: "Damage claims have to be reported within two hours, so normally this wouldn't be covered.",
        1: "Once it's delivered, anything that happens is on you, that's the policy.",
    },
    "warranty": {
        5: "The warranty covers {warranty_scope} for {warranty_months} months from delivery, and you're inside that, "
           "so the repair or replacement is free.",
        4: "It's still under the {warranty_months}-month warranty, so it's covered.",
        3: "I believe the warranty is somewhere around {near_months} months, it might cover this.",
        2: "The warranty only covers accidental damage, and only for 30 days.",
        1: "Warranties don't cover anything once the box is opened.",
    },
    "delivery": {
        5: "Orders arrive in {delivery_days} business days once they ship, and you can change the delivery date for "
           "free up to 48 hours before.",
        4: "It's {delivery_days} business days once it ships.",
        3: "Shipping is usually about a week, give or take, I think.",
        2: "Delivery takes four to six weeks, and we can't change the date once it's booked.",
        1: "We don't guarantee any delivery time at all, it gets there when it gets there.",
    },
    "subscription": {
        5: "If you cancel before the {renewal_day}, you won't be charged for next month's box; boxes that already "
           "shipped can't be refunded unless they arrive damaged.",
        4: "As long as you cancel before the {renewal_day}, you won't be charged again.",
        3: "I think you need to cancel a few days before renewal, maybe the 20th or so.",
        2: "Cancellations take effect after two more billing cycles.",
        1: "There's no way to cancel before the year is up, you're locked in.",
    },
    "dispute": {
        5: "You have {dispute_days} days from the statement date to dispute a charge; we'll put a provisional credit "
           "on the account within {provisional_credit_days} business days, and the investigation can take up to "
           "{investigation_days} days.",
        4: "You're within the {dispute_days}-day window, so we can open the dispute and issue a provisional credit.",
        3: "You've got about a month or so to dispute, I think, and the credit comes eventually.",
        2: "You have to settle it with the merchant first; we only step in after 120 days.",
        1: "We don't do disputes on this card, if the charge posted you have to pay it.",
    },
    "credit": {
        5: "Your purchase APR is {apr}, and a late payment can add a fee of up to {late_fee}; paying the statement "
           "balance by the due date avoids interest.",
        4: "The APR on the card is {apr}.",
        3: "The rate is somewhere in the twenties, I think, and there might be a late fee.",
        2: "The APR is 9.99% and there are no late fees on this card.",
        1: "Don't worry about interest or fees, this card doesn't charge any.",
    },
}  # fmt: skip

# The account's policy reference (system prompt), by topic, built from the same facts.
POLICY_REFERENCE = {
    "returns": "Returns: within {return_days} days of delivery, {return_condition}; refunds go to the original "
    "payment within {refund_days} business days of receipt; {restocking_fee}.",
    "damage": "Damaged or missing items: report within {report_hours} hours of delivery for a free replacement or a "
    "full refund.",
    "warranty": "Warranty: {warranty_months} months from delivery, covering {warranty_scope}.",
    "delivery": "Delivery: {delivery_days} business days after dispatch; delivery dates can be changed free of charge "
    "up to 48 hours before.",
    "subscription": "Subscription: cancel before the {renewal_day} to avoid the next charge; shipped boxes are not "
    "refunded unless damaged.",
    "dispute": "Disputes: within {dispute_days} days of the statement date; provisional credit within "
    "{provisional_credit_days} business days; investigation up to {investigation_days} days; the disputed amount need "
    "not be paid meanwhile.",
    "credit": "Card terms: purchase APR {apr}; late fee up to {late_fee}; paying the statement balance by the due "
    "date avoids interest; credit changes need the cardholder's explicit consent.",
}

# Longer calls wander: troubleshooting, measurements, account history. (agent line, customer line, the caller must
# have the item in hand) — an order that never arrived cannot be power-cycled.
VERTICAL_FILLER = {
    "electronics": (
        ("Go ahead and hold the power button down for about fifteen seconds.", "Okay... still nothing, same light.",
         True),
        ("Now unplug it, wait thirty seconds, and plug it back in.", "Okay, it's unplugged. Waiting.", True),
        ("The serial number on the order ends in {serial}.", "Yeah, that matches the sticker.", True),
        ("Try the other cable that came in the box.", "Same thing, it flickers and goes off.", True),
        ("I'm checking the stock at the warehouse near you.", "I'm in no rush, I just want it sorted.", False),
        ("The order history shows you bought a charger from us last year too.", "Yes, that one's been fine.", False),
        ("The product page lists a one-year manufacturer warranty on it.", "I remember seeing that.", False),
    ),
    "apparel": (
        ("The size chart says the medium is 40 inches at the chest.", "Yeah, that's what I measured at home.", False),
        ("I'm looking at the colour options for that style.", "The navy one, not the black.", False),
        ("The tag should have a six-digit style number on it.", "It says {serial}.", True),
        ("That style is showing in stock at the warehouse.", "Great, because the store didn't have it.", False),
        ("I'm checking whether this was a sale item.", "I think it was twenty percent off.", False),
    ),
    "grocery": (
        ("I'm looking at the picking notes for your order.", "It was the {weekday} morning slot.", False),
        ("The substitution settings on the account are set to allow.", "I never changed those.", False),
        ("I see the driver marked it delivered at 6:40.", "That's right, around then.", False),
        ("Your usual store is the one on {street}.", "Yes, that's the one.", False),
        ("I'm pulling up the receipt lines one by one.", "There were like forty items, so take your time.", False),
    ),
    "furniture": (
        ("That model is 90 inches wide, so it comes in through the main door.", "The door is 36 inches, it should fit.",
         False),
        ("I'm checking the delivery crew's route for that area.", "We're just off the highway.", False),
        ("The item number on the invoice ends in {serial}.", "That's the one.", False),
        ("I'm looking at the assembly notes for that model.", "The instructions were really confusing.", True),
        ("The warehouse shows a second one in the same fabric.", "Oh good, the grey one.", False),
    ),
    "beauty": (
        ("I'm looking at your box history for the last six months.", "I've had every box since last spring.", False),
        ("Your profile says skincare and fragrance.", "I'd rather have less fragrance, honestly.", False),
        ("The next box is scheduled to ship on the {renewal_day}.", "That's coming up fast.", False),
        ("I see the add-on you bought in {month}.", "Oh, the lip set, yes.", False),
        ("The shade preferences on file are from two years ago.", "Those are out of date for sure.", False),
    ),
    "card": (
        ("I'm looking at your last three statements.", "The {month} one is the one I care about.", False),
        ("Your payment history shows on-time payments since you opened the account.", "I try to keep it clean.",
         False),
        ("The statement closing date is the {due_day} of each month.", "Okay, I never remember that.", False),
        ("I see paperless statements are turned on.", "Yes, I don't want paper.", False),
        ("The account has been open since 2019.", "Wow, that long already.", False),
    ),
}  # fmt: skip
