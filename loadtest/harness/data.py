"""What the benchmark sends: generated memory records (short support-desk facts, deterministic for a
given count) and Messages bodies (a fixed set of questions that repeat, a template whose `{n}`
loadgen makes unique per request, and a streaming body).

Records are `fact` v1 records. Half are scoped to `team:support`, half to one of 500 customers
(`user:u-0` … `user:u-499`); the benchmark's key has `team:support` and asserts the subject
`u-7`, so it sees about half of them: the funnel's scope layer has real work, and the semantic
layer ranks tens of thousands of candidates at 100,000 records.
"""

import json
import random

MODEL = "claude-mock-1"
SYSTEM = "You are a terse support assistant."
SUBJECT = "u-7"
CALLER_SCOPES = ["team:support"]

PRODUCTS = [
    "espresso machine", "standing desk", "trail running shoes", "noise-cancelling headphones",
    "air purifier", "cast iron skillet", "electric kettle", "mechanical keyboard", "yoga mat",
    "robot vacuum", "winter jacket", "baby stroller", "camping tent", "office chair",
    "smart thermostat", "road bike helmet", "blender", "wool blanket", "garden hose",
    "laptop sleeve", "ceramic teapot", "desk lamp", "water filter", "hiking backpack",
    "portable speaker", "kids' scooter", "rice cooker", "bath towels", "phone charger",
    "coffee grinder",
]
COLOURS = ["black", "white", "navy", "red", "olive", "grey", "sand", "teal", "plum", "amber"]
ISSUES = [
    "arrived with a cracked lid", "was delivered to the wrong address", "is missing its power cable",
    "was charged twice", "has not shipped after ten days", "came in the wrong size",
    "stopped working after a week", "was returned but not refunded", "arrived late for a birthday",
    "has a scratch on the side", "was left outside in the rain", "shows a different colour than ordered",
    "needs an invoice with the company name", "was cancelled by mistake", "is too loud at night",
]
RESOLUTIONS = [
    "a replacement was sent by express", "a full refund was issued", "a 15% voucher was offered",
    "the courier opened an investigation", "the customer prefers a call back in the morning",
    "the order was re-routed to the pickup point", "the warranty claim was approved",
    "the customer asked to be contacted in Spanish", "a technician visit is booked",
    "the second charge was reversed", "the customer will keep it with a partial refund",
    "the case is escalated to the logistics team",
]
CITIES = ["Lyon", "Porto", "Leeds", "Graz", "Malmo", "Turin", "Ghent", "Krakow", "Bilbao", "Utrecht"]

QUESTIONS = [
    "Where is my {p} order? It was supposed to arrive last week.",
    "My {p} {i}. What can you do about it?",
    "Can I get a refund for the {p}? It {i}.",
    "I was charged twice for the {p}, please check my account.",
    "Has the replacement {p} been shipped yet?",
    "Can you send me an invoice for the {p} with my company name on it?",
    "The courier says my {p} was delivered but I never got it.",
    "What did we agree last time about my {p}?",
]


def records(count, seed=12):
    """`count` JSON Lines records, the same for the same count and seed."""
    rng = random.Random(seed)
    lines = []
    for k in range(count):
        product = rng.choice(PRODUCTS)
        scope = ["team:support"] if k % 2 == 0 else [f"user:u-{(k // 2) % 500}"]
        customer = scope[0].split(":", 1)[1] if k % 2 else f"u-{rng.randrange(500)}"
        statement = (
            f"Order {100000 + k} from customer {customer} in {rng.choice(CITIES)}: the "
            f"{rng.choice(COLOURS)} {product} {rng.choice(ISSUES)}; {rng.choice(RESOLUTIONS)}."
        )
        record = {
            "type": "fact",
            "schema_version": "v1",
            "scope": scope,
            "priority": 1 + k % 5,
            "content": {"statement": statement, "subject": f"order {100000 + k}",
                        "source": "loadtest"},
        }
        lines.append(json.dumps(record, separators=(",", ":")))
    return lines


def body(question, stream=False):
    payload = {"model": MODEL, "max_tokens": 256, "system": SYSTEM,
               "messages": [{"role": "user", "content": question}]}
    if stream:
        payload["stream"] = True
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def warm_questions(count=32, seed=7):
    """A fixed set of questions (the benchmark sends them in turn, so after the first round every
    query embedding comes from memgate's cache)."""
    rng = random.Random(seed)
    out = []
    while len(out) < count:
        q = rng.choice(QUESTIONS).format(p=rng.choice(PRODUCTS), i=rng.choice(ISSUES))
        if q not in out:
            out.append(q)
    return out


def unique_template():
    """One body whose question loadgen `--unique` makes new for every request (the `{n}`)."""
    return body("Ticket {n}: my order has not arrived and the tracking page shows no update. "
                "What happened to it?")
