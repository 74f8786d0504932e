"""The eval Task abstraction and the runner over any `Client`.

A Task is a list of Items (id, prompt, gold), a generation setting (max_tokens, temperature,
stop) and two pure functions: `extract` (completion text -> answer) and `score` (answer, gold ->
correct). Running a task asks the client for completions and returns per-item results, the
accuracy and its standard error.
"""
from __future__ import annotations

import asyncio
import inspect
import re

from pydantic import BaseModel

from tools.evals.stats import accuracy

_NUM = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")


class Item(BaseModel):
    id: str
    prompt: str
    gold: str
    question: str = ""  # the item's own question text (the prompt may add few-shot examples)


class ItemResult(BaseModel):
    id: str
    output: str
    answer: str | None
    gold: str
    correct: bool
    error: str | None = None


class EvalResult(BaseModel):
    task: str
    n: int
    accuracy: float
    stderr: float
    items: list[ItemResult]
    settings: dict = {}

    def correct(self) -> list[int]:
        return [int(i.correct) for i in self.items]


def normalize_number(s: str) -> str | None:
    """'$1,234.50' -> '1234.5'; None when there is no number."""
    m = _NUM.search(s)
    if not m:
        return None
    t = m.group(0).replace("$", "").replace(",", "")
    try:
        x = float(t)
    except ValueError:
        return None
    return str(int(x)) if x.is_integer() else repr(x)


class Task:
    name: str = ""
    max_tokens: int = 256
    temperature: float = 0.0
    stop: list[str] | None = None

    def __init__(self, items: list[Item]):
        self.items = items

    def extract(self, text: str) -> str | None:
        return text.strip() or None

    def score(self, answer: str | None, gold: str) -> bool:
        return answer is not None and answer == gold

    def evaluate(self, outputs: list[str], errors: dict[int, str] | None = None,
                 items: list[Item] | None = None) -> EvalResult:
        """Pure: outputs (in item order) -> per-item results, accuracy, stderr."""
        items = self.items if items is None else items
        res = []
        for i, (it, out) in enumerate(zip(items, outputs, strict=True)):
            ans = self.extract(out)
            res.append(ItemResult(id=it.id, output=out, answer=ans, gold=it.gold,
                                  correct=self.score(ans, it.gold), error=(errors or {}).get(i)))
        acc, se = accuracy([r.correct for r in res])
        return EvalResult(task=self.name, n=len(res), accuracy=acc, stderr=se, items=res,
                          settings={"max_tokens": self.max_tokens, "temperature": self.temperature})

    async def arun(self, client, *, limit: int | None = None, seed: int = 0) -> EvalResult:
        items = self.items[:limit] if limit else self.items
        if not items:
            raise ValueError(f"task {self.name} has no items")
        kw = {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": seed}
        if self.stop and "stop" in inspect.signature(client.complete).parameters:
            kw["stop"] = self.stop  # the HTTP client takes stop sequences; the protocol does not require it
        outs = await client.complete([it.prompt for it in items], **kw)
        return self.evaluate(list(outs), getattr(client, "errors", None), items)

    def run(self, client, *, limit: int | None = None, seed: int = 0) -> EvalResult:
        return asyncio.run(self.arun(client, limit=limit, seed=seed))
