"""GSM8K: grade-school math, 5-shot, greedy, the answer after `####`.

Data: the official test split as JSONL ({"question", "answer"} per line, the answer ending in
`#### <number>`). Get it once with
    curl -L -o gsm8k-test.jsonl \\
      https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data/test.jsonl
and pass `--data gsm8k-test.jsonl` (or set INFERLOOP_SHARED to a folder holding data/gsm8k/test.jsonl).
The first five lines are the few-shot examples and are not scored; items are numbered by line.
Prompt format (lm-evaluation-harness style): "Question: ...\\nAnswer: <worked answer>\\n\\n" x 5,
then "Question: <item>\\nAnswer:". The item's question is the last question in the prompt.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from tools.errors import BadInput
from tools.evals.tasks import Item, Task, normalize_number

SHOTS = 5
_HASH = re.compile(r"####\s*(-?\$?[\d,]*\.?\d+)")


def load(path: Path | str) -> list[dict]:
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"GSM8K data file {p} not found (see `agent eval --help` for how to fetch it)")
    rows = []
    for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            q, a = d["question"], d["answer"]
            if not isinstance(q, str) or not isinstance(a, str) or "####" not in a:
                raise ValueError
        except (ValueError, KeyError, TypeError):
            raise BadInput(f"{p}:{n}: not a GSM8K line (need JSON with 'question' and an 'answer' "
                           "ending in '#### <number>')") from None
        rows.append({"line": n - 1, "question": q, "answer": a})
    if len(rows) <= SHOTS:
        raise BadInput(f"{p} has {len(rows)} items; need more than the {SHOTS} few-shot examples")
    return rows


def gold_of(answer: str) -> str:
    return normalize_number(answer.split("####")[-1]) or answer.split("####")[-1].strip()


class GSM8K(Task):
    name = "gsm8k"
    max_tokens = 256
    stop = ["Question:", "</s>", "<|im_end|>"]

    @classmethod
    def from_file(cls, path: Path | str) -> "GSM8K":
        rows = load(path)
        shots = "".join(f"Question: {r['question']}\nAnswer: {r['answer']}\n\n" for r in rows[:SHOTS])
        items = [Item(id=f"gsm8k-{r['line']:04d}", prompt=f"{shots}Question: {r['question']}\nAnswer:",
                      gold=gold_of(r["answer"]), question=r["question"]) for r in rows[SHOTS:]]
        return cls(items)

    def extract(self, text: str) -> str | None:
        """The number after the first `####`; else the last number before any new question."""
        text = text.split("Question:")[0]
        m = _HASH.search(text)
        if m:
            return normalize_number(m.group(1))
        nums = re.findall(r"-?\$?\d[\d,]*(?:\.\d+)?", text)
        return normalize_number(nums[-1]) if nums else None

    def score(self, answer: str | None, gold: str) -> bool:
        return answer is not None and answer == normalize_number(gold)
