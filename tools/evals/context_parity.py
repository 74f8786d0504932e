"""The quality gate of the GPU ground: greedy-output parity against the reference configuration.

The test model has random weights, so accuracy means nothing; what can still go wrong is the
numerics (a lower-precision dtype, a different kernel, a batching bug), and greedy decoding shows
it. A random network is chaotic, though (measured on the H200, tests/gpu/results/probe/: the reference
configuration run batched instead of one prompt at a time keeps the first 16 greedy tokens of only
42% of the prompts), so comparing free-running continuations would measure the cascade after the
first flipped token, not the numerics. Parity is therefore taken at fixed contexts: each item is a
prompt cut at several word positions, and at each cut the server's greedy next `tokens` tokens
are compared with the reference configuration's. An item scores the fraction of its cuts that
agree. The reference is whatever the run evaluates first, i.e. the baseline (the framework's
defaults), kept in the run directory so a resumed run compares against the same outputs.

It obeys agent.measure.EvalSuite, so the loop's paired non-inferiority gate reads it like any eval.
"""
from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

from tools.atomic import write_whole

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
    """1 where the output equals the reference output, per query; a failed request ('') scores 0."""
    if len(outputs) != len(reference):
        raise ValueError(f"parity needs the same items: {len(outputs)} outputs vs {len(reference)} references")
    return [int(bool(o) and o == r) for o, r in zip(outputs, reference)]


def contexts(items: int, cuts: int, *, words: int = 48) -> list[tuple[int, str]]:
    """(item, context) pairs: each prompt cut after `cuts` evenly spaced word counts."""
    out = []
    for i, p in enumerate(prompts(items, words=words)):
        w = p.split(" ")
        for j in range(cuts):
            n = max(4, round(words * (j + 1) / cuts))
            out.append((i, " ".join(w[:n])))
    return out


def per_item(hits: list[int], item_of: list[int], items: int) -> list[float]:
    """Mean agreement per item (the unit the paired gate compares)."""
    tot, n = [0] * items, [0] * items
    for h, i in zip(hits, item_of):
        tot[i] += h
        n[i] += 1
    return [t / k if k else 0.0 for t, k in zip(tot, n)]


class ParitySuite:
    def __init__(self, run_dir: Path, *, items: int = 12, cuts: int = 8, tokens: int = 1, concurrency: int = 1):
        self.ref_path = Path(run_dir) / "parity_reference.json"
        self.log_path = Path(run_dir) / "parity_runs.jsonl"
        self.items, self.cuts, self.tokens, self.concurrency = items, cuts, tokens, concurrency

    def run(self, client, *, limit: int, seed: int) -> dict[str, list[float]]:
        n = min(limit, self.items)
        q = contexts(n, self.cuts)
        t0 = time.time()
        outs = asyncio.run(client.complete([c for _, c in q], max_tokens=self.tokens, temperature=0.0, seed=seed,
                                           concurrency=self.concurrency))
        errors = getattr(client, "errors", {}) or {}
        if not self.ref_path.exists():
            if errors:  # a reference with holes would make every later comparison wrong
                raise RuntimeError(f"reference outputs incomplete: {len(errors)} requests failed, "
                                   f"e.g. {next(iter(errors.values()))}")
            # whole or not at all: a kill mid-write left half a JSON file, and every later trial
            # of the run (and its resume) failed reading it
            write_whole(self.ref_path, json.dumps({"tokens": self.tokens, "cuts": self.cuts, "outputs": outs},
                                                  indent=1) + "\n")
        ref = json.loads(self.ref_path.read_text())["outputs"][:len(q)]
        hits = score(outs, ref)
        s = per_item(hits, [i for i, _ in q], n)
        with self.log_path.open("a") as f:
            f.write(json.dumps({"t": round(t0, 1), "seconds": round(time.time() - t0, 2), "agree": sum(hits) / len(hits),
                                "per_item": s, "errors": {str(k): v for k, v in errors.items()},
                                "outputs": outs}) + "\n")
        return {TASK: s}
