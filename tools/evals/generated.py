"""Eval tasks over the deterministic generators of tools/evals/synthetic.py: a long-context needle
task (the ATOM-style failure: quality falls only when the prompt is long), GPQA-Diamond-shaped
multiple choice and tau2-shaped tool calls (the story's other two evals). All greedy, so a paired
comparison between two configurations sees only what the configurations changed.
"""
from __future__ import annotations

import re

from tools.evals import synthetic
from tools.evals.tasks import Item, Task

_LETTER = re.compile(r"Answer:\s*\(?([ABCD])\b")
_CALL = re.compile(r"[A-Za-z_]\w*\([^()]*\)")
_INT = re.compile(r"\d+")


class LongContext(Task):
    """Find a numeric code stated once in a long document; the needle depth varies per item."""
    name = "longctx"
    max_tokens = 16
    stop = ["\n"]

    def __init__(self, context_tokens: int = 20000, n: int = 50):
        self.context_tokens = context_tokens
        items = synthetic.long_context_items(n, context_tokens=context_tokens)
        super().__init__([Item(id=it["id"], prompt=synthetic.long_context_prompt(it), gold=it["gold"],
                               question=it["question"]) for it in items])

    def extract(self, text: str) -> str | None:
        m = _INT.search(text)
        return m.group(0) if m else None


class GPQADiamond(Task):
    """Four-option science questions; the answer is the letter after 'Answer:'."""
    name = "gpqa-diamond"
    max_tokens = 256

    def __init__(self):
        super().__init__([Item(id=it["id"], prompt=synthetic.gpqa_prompt(it), gold=it["gold"],
                               question=it["question"]) for it in synthetic.gpqa_diamond_items()])

    def extract(self, text: str) -> str | None:
        m = _LETTER.findall(text)
        return m[-1] if m else None


TAU2_TOOLS = sorted({call.split("(")[0] for calls in synthetic._ACTIONS.values() for _, call in calls}
                    | {"transfer_to_human_agents"})


def tau2_prompt(item: dict) -> str:
    return (f"You are a customer-service agent for the {item['domain']} domain. Available tools: "
            f"{', '.join(TAU2_TOOLS)}.\n{item['question']}\nReply with the tool call only.")


class Tau2(Task):
    """Customer-service tasks (airline, retail, telecom); correct when the exact tool call is made.
    Scored per item; the story's macro average over domains is a reporting choice, not the gate's."""
    name = "tau2"
    max_tokens = 96

    def __init__(self):
        super().__init__([Item(id=it["id"], prompt=tau2_prompt(it), gold=it["gold"], question=it["question"])
                          for it in synthetic.tau2_items()])

    def extract(self, text: str) -> str | None:
        m = _CALL.search(text)
        return m.group(0).replace('"', "'") if m else None
