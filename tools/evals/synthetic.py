"""Deterministic item generators for the eval tasks that have no public data file here:
GPQA-Diamond-shaped multiple choice (198 items), tau2-shaped tool-use tasks (three domains,
macro-averaged), and a long-context needle task whose prompts are as long as the throughput
workload's input. Same items on every machine, every run (no randomness outside a seeded RNG).

Each item is a plain dict: {"id", "task", "question", "gold", ...}. `question` is the text a
prompt must contain verbatim (the simulator recognises an item by it); `gold` is what scoring
compares against (a letter, a tool call, a number).
"""
from __future__ import annotations

import random

GPQA_SIZE = 198
TAU2_DOMAINS = {"airline": 50, "retail": 114, "telecom": 114}
LETTERS = "ABCD"


def _choices(rng: random.Random, correct: str, wrong: list[str]) -> tuple[list[str], str]:
    opts = [correct] + wrong[:3]
    rng.shuffle(opts)
    return opts, LETTERS[opts.index(correct)]


def gpqa_diamond_items(n: int = GPQA_SIZE) -> list[dict]:
    """Graduate-level-style science multiple choice, four options, one correct letter."""
    rng = random.Random(20251129)
    items = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            m, v = rng.randint(2, 90), rng.randint(3, 400)
            q = (f"A particle of rest mass {m} MeV/c^2 is accelerated until its kinetic energy is {v} MeV. "
                 f"What is its Lorentz factor gamma, to three significant figures?")
            g = 1 + v / m
            correct, wrong = f"{g:.3g}", [f"{v / m:.3g}", f"{(1 + v / m) ** 0.5:.3g}", f"{1 + 2 * v / m:.3g}"]
        elif kind == 1:
            k, t = rng.randint(2, 9) * 10 ** rng.randint(-4, -1), rng.randint(2, 6)
            q = (f"A first-order reaction has rate constant {k:g} s^-1. After {t} half-lives, what fraction "
                 f"of the reactant remains (sample {i})?")
            correct, wrong = f"1/{2 ** t}", [f"1/{2 * t}", f"1/{2 ** (t + 1)}", f"1/{t ** 2 + 1}"]
        elif kind == 2:
            a, b = rng.randint(2, 6), rng.randint(2, 6)
            q = (f"In a dihybrid cross of two heterozygotes where gene {i} shows complete dominance and the "
                 f"second locus is {a}x more likely to recombine than baseline (map distance {b * 5} cM), "
                 f"what fraction of offspring show both recessive phenotypes if the loci were unlinked?")
            correct, wrong = "1/16", ["3/16", "9/16", "1/4"]
        else:
            n_e, s = rng.randint(1, 5), rng.choice(["1/2", "3/2", "5/2"])
            q = (f"An atom's ground-state term has {n_e} unpaired electron(s) and total orbital angular momentum "
                 f"L = {n_e + 1}, with nuclear spin I = {s} (case {i}). What is the spin multiplicity 2S+1?")
            correct, wrong = str(n_e + 1), [str(n_e), str(2 * n_e + 1), str(n_e + 2)]
        opts, gold = _choices(rng, correct, wrong)
        items.append({"id": f"gpqa-{i:03d}", "task": "gpqa-diamond", "question": q, "choices": opts, "gold": gold})
    return items


def gpqa_prompt(item: dict) -> str:
    lines = [item["question"]] + [f"({LETTERS[j]}) {c}" for j, c in enumerate(item["choices"])]
    return "\n".join(lines) + "\nThink briefly, then finish with 'Answer: <letter>'."


_NAMES = ["Ava", "Ben", "Chloe", "Dev", "Emil", "Farah", "Gus", "Hana", "Ivan", "Jia", "Kofi", "Lena"]
_ACTIONS = {
    "airline": [("cancel", "cancel_reservation(reservation_id='{code}')"),
                ("change the flight of", "update_reservation_flights(reservation_id='{code}', cabin='economy')"),
                ("add a checked bag to", "update_reservation_baggages(reservation_id='{code}', total_baggages=2)")],
    "retail": [("return", "return_delivered_order_items(order_id='#W{num}', item_ids=['{item}'])"),
               ("exchange an item in", "exchange_delivered_order_items(order_id='#W{num}', item_ids=['{item}'])"),
               ("cancel", "cancel_pending_order(order_id='#W{num}', reason='no longer needed')")],
    "telecom": [("turn on roaming for", "enable_roaming(line_id='L{num}')"),
                ("refuel mobile data on", "refuel_data(line_id='L{num}', gb=2)"),
                ("suspend", "suspend_line(line_id='L{num}', reason='lost device')")],
}


def tau2_items() -> list[dict]:
    """Customer-service tasks per domain; gold is the tool call that resolves the task."""
    rng = random.Random(7)
    items = []
    for domain, n in TAU2_DOMAINS.items():
        for i in range(n):
            verb, call = _ACTIONS[domain][i % 3]
            code = "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(6))
            num, item = rng.randint(1000000, 9999999), rng.randint(10 ** 9, 10 ** 10 - 1)
            who = f"{rng.choice(_NAMES)} {rng.choice(['Ito', 'Khan', 'Lopez', 'Moreau', 'Novak', 'Okafor'])}"
            target = {"airline": f"reservation {code}", "retail": f"order #W{num} (item {item})",
                      "telecom": f"line L{num}"}[domain]
            q = (f"[{domain} task {i}] {who} asks the agent to {verb} {target}. "
                 f"Policy checks pass. Which single tool call completes the task?")
            gold = call.format(code=code, num=num, item=item)
            items.append({"id": f"tau2-{domain}-{i:03d}", "task": "tau2", "domain": domain, "question": q,
                          "gold": gold})
    return items


_ADJ = ["quiet", "amber", "northern", "hollow", "patient", "silver", "restless", "narrow", "ancient", "bright"]
_NOUN = ["harbor", "orchard", "library", "bridge", "market", "valley", "workshop", "lantern", "garden", "canal"]
_VERB = ["overlooks", "shelters", "remembers", "borders", "outlasts", "echoes", "guards", "mirrors"]
_PROJ = ["Kestrel", "Juniper", "Obsidian", "Marigold", "Tamarack", "Halcyon", "Vesper", "Cobalt", "Saffron",
         "Larkspur"]


def long_context_items(n: int = 50, context_tokens: int = 20000, seed: int = 0) -> list[dict]:
    """Needle-in-a-haystack over ~context_tokens tokens of filler (about 4 characters per token):
    one sentence states a numeric code, the question at the end asks for it. Needle depths are
    spread evenly from the start to the end of the context."""
    rng = random.Random(1000 + seed)
    items = []
    for i in range(n):
        proj = f"{_PROJ[i % len(_PROJ)]}-{i:03d}"
        code = rng.randint(100000, 999999)
        needle = f"The access code for the {proj} archive is {code}."
        sentences = []
        chars = 0
        while chars < context_tokens * 4:
            s = f"The {rng.choice(_ADJ)} {rng.choice(_NOUN)} {rng.choice(_VERB)} the {rng.choice(_ADJ)} {rng.choice(_NOUN)}."
            sentences.append(s)
            chars += len(s) + 1
        depth = (i + 0.5) / n
        sentences.insert(int(depth * len(sentences)), needle)
        question = f"What is the access code for the {proj} archive? Reply with the number only."
        items.append({"id": f"longctx-{i:03d}", "task": "longctx", "context": " ".join(sentences),
                      "needle": needle, "depth": depth, "question": question, "gold": str(code)})
    return items


def long_context_prompt(item: dict) -> str:
    return f"Read the document and answer the question.\n\n{item['context']}\n\nQuestion: {item['question']}\nAnswer:"
