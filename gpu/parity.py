"""The quality gate of the GPU ground: greedy-output parity against the reference configuration.

The test model has random weights, so accuracy means nothing; what can still go wrong is the
numerics (a lower-precision dtype, a different kernel, a batching bug), and greedy decoding shows
it: the reference configuration's outputs are recorded once, and every later configuration is
scored per prompt, 1 when its first `tokens` greedy tokens are the reference's, else 0. The
reference is whatever the run evaluates first, i.e. the baseline (the framework's defaults), and
it is kept in the run directory so a resumed run compares against the same outputs.

It obeys agent.measure.EvalSuite, so the loop's paired non-inferiority gate reads it like any eval.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

TASK = "greedy_parity"
_WORDS = ("the a of to in is that for on with as was by at from it an be this are or which have has "
          "not but one all were when we there can more if will out so up about into than them some "
          "time only new like over such after also most made very where through back years way well "
          "even because good each those people how too little state world day year work life city "
          "water number system group part place case point government company week hand fact").split()


def prompts(n: int, *, words: int = 48, seed: int = 7) -> list[str]:
    """n fixed prompts of plain English words (deterministic: same items on every machine)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() for _ in range(n)]


def score(outputs: list[str], reference: list[str]) -> list[int]:
    """1 where the output equals the reference output, per item; a failed request ('') scores 0."""
    if len(outputs) != len(reference):
        raise ValueError(f"parity needs the same items: {len(outputs)} outputs vs {len(reference)} references")
    return [int(bool(o) and o == r) for o, r in zip(outputs, reference)]


class ParitySuite:
    def __init__(self, run_dir: Path, *, items: int = 16, tokens: int = 24, concurrency: int = 1):
        self.ref_path = Path(run_dir) / "parity_reference.json"
        self.log_path = Path(run_dir) / "parity_runs.jsonl"
        self.items, self.tokens, self.concurrency = items, tokens, concurrency

    def run(self, client, *, limit: int, seed: int) -> dict[str, list[int]]:
        n = min(limit, self.items)
        ps = prompts(n)
        t0 = time.time()
        outs = asyncio.run(client.complete(ps, max_tokens=self.tokens, temperature=0.0, seed=seed,
                                           concurrency=self.concurrency))
        errors = getattr(client, "errors", {}) or {}
        if not self.ref_path.exists():
            if errors:  # a reference with holes would make every later comparison wrong
                raise RuntimeError(f"reference outputs incomplete: {len(errors)} requests failed, "
                                   f"e.g. {next(iter(errors.values()))}")
            self.ref_path.write_text(json.dumps({"tokens": self.tokens, "outputs": outs}, indent=1) + "\n")
        ref = json.loads(self.ref_path.read_text())["outputs"][:n]
        s = score(outs, ref)
        with self.log_path.open("a") as f:
            f.write(json.dumps({"t": round(t0, 1), "seconds": round(time.time() - t0, 2), "score": s,
                                "errors": {str(k): v for k, v in errors.items()}, "outputs": outs}) + "\n")
        return {TASK: s}
