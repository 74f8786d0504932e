"""Statistics for evals: accuracy with its standard error, and the paired comparison of two
configurations on the same items (exact McNemar test, paired bootstrap CI of the difference)
with a non-inferiority verdict at a stated margin. Pure functions."""
from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel


def accuracy(correct: list[bool | int]) -> tuple[float, float]:
    """(mean, standard error of the mean) with the sample standard deviation (ddof=1), as
    lm-evaluation-harness reports it; the SE of n<2 items is reported as 0."""
    n = len(correct)
    if n == 0:
        raise ValueError("no items")
    p = sum(map(int, correct)) / n
    se = math.sqrt(p * (1 - p) / (n - 1)) if n > 1 else 0.0
    return p, se


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: b, c are the discordant counts (reference right and
    candidate wrong; reference wrong and candidate right). Binomial(b+c, 1/2) tail, doubled."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


class Comparison(BaseModel):
    n: int
    ref_accuracy: float
    cand_accuracy: float
    delta: float  # candidate - reference
    ci_low: float  # paired bootstrap, two-sided (1 - 2 alpha), i.e. one-sided alpha lower bound
    ci_high: float
    b: int  # reference right, candidate wrong
    c: int  # reference wrong, candidate right
    mcnemar_p: float
    margin: float
    alpha: float
    non_inferior: bool
    verdict: str


def compare(ref: list[bool | int], cand: list[bool | int], *, margin: float = 0.02, alpha: float = 0.05,
            n_boot: int = 10000, seed: int = 0) -> Comparison:
    """Is the candidate no worse than the reference by more than `margin` (absolute accuracy)?
    Non-inferior when the one-sided (1-alpha) lower bound of the paired difference is above
    -margin. Items must be the same, in the same order."""
    if len(ref) != len(cand):
        raise ValueError(f"paired comparison needs the same items: {len(ref)} vs {len(cand)}")
    if not ref:
        raise ValueError("no items")
    r = np.asarray(ref, dtype=float)
    k = np.asarray(cand, dtype=float)
    d = k - r
    n = len(d)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    means = d[idx].mean(axis=1)
    lo, hi = (float(x) for x in np.quantile(means, [alpha, 1 - alpha]))
    b, c = int(((r == 1) & (k == 0)).sum()), int(((r == 0) & (k == 1)).sum())
    delta = float(d.mean())
    ok = lo > -margin
    verdict = (f"non-inferior: delta {delta:+.3f}, {1 - alpha:.0%} lower bound {lo:+.3f} > -{margin:g}" if ok else
               f"not shown non-inferior: delta {delta:+.3f}, {1 - alpha:.0%} lower bound {lo:+.3f} <= -{margin:g}")
    return Comparison(n=n, ref_accuracy=float(r.mean()), cand_accuracy=float(k.mean()), delta=delta,
                      ci_low=lo, ci_high=hi, b=b, c=c, mcnemar_p=mcnemar_exact(b, c), margin=margin,
                      alpha=alpha, non_inferior=ok, verdict=verdict)
