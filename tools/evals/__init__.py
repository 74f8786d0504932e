"""Accuracy evals over any Client: GSM8K (5-shot), a factual-QA task, greedy-output parity, and
generated long-context / GPQA-Diamond-shaped / tau2-shaped tasks (tools.evals.generated);
accuracy with standard errors and paired non-inferiority comparisons (tools.evals.stats).

`suite_for(...)` gives the loop its default eval suite: `Suite.run(client, limit=, seed=)` ->
{task name: per-item 0/1}, same items in the same order on every call.
"""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tools.errors import unknown
from tools.evals.tasks import EvalResult, Item, Task

TASKS = ("gsm8k", "qa", "parity", "longctx", "gpqa-diamond", "tau2")
HARNESSES = ("inferloop", "lm-eval")  # who scores: the project's own tasks, or lm-evaluation-harness


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
    from tools.evals import generated
    if name == "longctx":
        return generated.LongContext()
    if name == "gpqa-diamond":
        return generated.GPQADiamond()
    if name == "tau2":
        return generated.Tau2()
    raise unknown("eval task", name, TASKS)


class Suite:
    def __init__(self, tasks: list[Task]):
        self.tasks = tasks

    def run(self, client, *, limit: int, seed: int = 0) -> dict[str, list[int]]:
        async def go():
            return {t.name: (await t.arun(client, limit=limit, seed=seed)).correct() for t in self.tasks}
        return asyncio.run(go())


def long_context_tokens(cfg=None, card=None, max_tokens: int = 16) -> int:
    """The long-context task's document length: the workload's input length (what the server is
    tuned for), capped inside the model's context window with room for the question and answer
    (documents are sized at ~4 characters per token, so keep a fifth in reserve)."""
    want = int(getattr(getattr(getattr(cfg, "measure", None), "workload", None), "input_len", 0) or 20000)
    window = int(getattr(card, "max_position_embeddings", 0) or 0)
    if window:
        want = min(want, int((window - max_tokens - 64) * 0.8))
    return max(want, 64)


def suite_for(cfg=None, card=None, hw=None) -> Suite:
    """The loop's default gate, the same on every ground: GSM8K (when its data file is present),
    long context at the workload's input length, GPQA-Diamond- and tau2-shaped tasks, factual QA."""
    m = getattr(cfg, "measure", None)
    if getattr(m, "harness", "inferloop") == "lm-eval":
        from tools.evals import lm_eval
        lm_eval.need()
        return lm_eval.Suite(list(m.eval_tasks or ["gsm8k"]))
    from tools.evals import generated
    tasks: list[Task] = []
    if shared_gsm8k().is_file():
        tasks.append(get_task("gsm8k"))
    tasks.append(generated.LongContext(context_tokens=long_context_tokens(cfg, card)))
    tasks += [generated.GPQADiamond(), generated.Tau2(), get_task("qa")]
    return Suite(tasks)


__all__ = ["TASKS", "EvalResult", "Item", "Suite", "Task", "get_task", "suite_for"]
