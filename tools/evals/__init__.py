"""Accuracy evals over any Client: GSM8K (5-shot), a factual-QA task, greedy-output parity;
accuracy with standard errors and paired non-inferiority comparisons (tools.evals.stats).

`suite_for(...)` gives the loop its default eval suite: `Suite.run(client, limit=, seed=)` ->
{task name: per-item 0/1}, same items in the same order on every call.
"""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

from agent.errors import unknown
from tools.evals.tasks import EvalResult, Item, Task

TASKS = ("gsm8k", "qa", "parity")


def shared_gsm8k() -> Path:
    env = os.environ.get("INFERLOOP_SHARED")
    base = Path(env) if env else Path(__file__).resolve().parents[2] / ".." / "shared"
    return base / "data" / "gsm8k" / "test.jsonl"


def get_task(name: str, *, data: Path | str | None = None) -> Task:
    if name == "gsm8k":
        from tools.evals.gsm8k import GSM8K
        return GSM8K.from_file(data or shared_gsm8k())
    if name == "qa":
        from tools.evals.qa import FactQA
        return FactQA()
    if name == "parity":
        from tools.evals.parity import Parity
        return Parity()
    raise unknown("eval task", name, TASKS)


class Suite:
    def __init__(self, tasks: list[Task]):
        self.tasks = tasks

    def run(self, client, *, limit: int, seed: int = 0) -> dict[str, list[int]]:
        async def go():
            return {t.name: (await t.arun(client, limit=limit, seed=seed)).correct() for t in self.tasks}
        return asyncio.run(go())


def suite_for(cfg=None, card=None, hw=None) -> Suite:
    """GSM8K when its data file is present here, and the factual QA task."""
    tasks: list[Task] = []
    if shared_gsm8k().is_file():
        tasks.append(get_task("gsm8k"))
    tasks.append(get_task("qa"))
    return Suite(tasks)


__all__ = ["TASKS", "EvalResult", "Item", "Suite", "Task", "get_task", "suite_for"]
