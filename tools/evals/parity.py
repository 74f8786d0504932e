"""Greedy-output parity against a reference configuration.

The same prompts are completed greedily (temperature 0) by the reference and by the candidate;
an item is correct when the candidate's text equals the reference's exactly. A change that should
not alter the numerics (a scheduler flag) must keep parity near 1; a change of precision or
kernels shows up as divergence, item by item, before any accuracy task would notice.
"""
from __future__ import annotations

from tools.evals.qa import FACTS
from tools.evals.tasks import EvalResult, Item, Task

OPEN_PROMPTS = [
    "The capital of France is", "Once upon a time, in a small village,", "def fibonacci(n):",
    "The three primary colors are", "Water is made of", "The best way to learn a language is",
    "In 1969, astronauts", "A recipe for pancakes:", "The main function of the heart is",
    "Photosynthesis is the process by which",
]


def default_prompts() -> list[str]:
    return OPEN_PROMPTS + [f"Question: {q}\nAnswer:" for q, _ in FACTS]


class Parity(Task):
    name = "parity"
    max_tokens = 32

    def __init__(self, prompts: list[str] | None = None, reference: list[str] | None = None):
        ps = prompts or default_prompts()
        ref = reference if reference is not None else [""] * len(ps)
        if len(ref) != len(ps):
            raise ValueError(f"{len(ref)} reference outputs for {len(ps)} prompts")
        super().__init__([Item(id=f"parity-{i:02d}", prompt=p, gold=r) for i, (p, r) in enumerate(zip(ps, ref))])

    def extract(self, text: str) -> str | None:
        return text  # exact text, whitespace included

    def score(self, answer: str | None, gold: str) -> bool:
        return answer == gold

    async def arun_pair(self, reference_client, client, *, limit: int | None = None, seed: int = 0) -> EvalResult:
        """Reference outputs first, then the candidate's, compared item by item."""
        items = self.items[:limit] if limit else self.items
        prompts = [it.prompt for it in items]
        ref = await reference_client.complete(prompts, max_tokens=self.max_tokens, temperature=0.0, seed=seed)
        errs = getattr(reference_client, "errors", None)
        if errs:
            raise RuntimeError(f"the reference failed on {len(errs)} of {len(prompts)} prompts: {next(iter(errs.values()))}")
        task = Parity(prompts, list(ref))
        return await task.arun(client, seed=seed)
