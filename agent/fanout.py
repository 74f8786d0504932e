"""A repeat's measurements side by side (issue 18). When the keep/revert rule wants the trial at
the head of the queue measured again and nodes are free, its remaining repeats run at once, each
side of each repeat on a node of its own, instead of one after another on one node: those repeats
were the longest chain on a parallel run's critical path. Every measurement keeps the bench seed a
one-at-a-time run gives it, and decide() reads medians, spreads and counts, so the verdict does
not depend on the order the sides come back in."""
from __future__ import annotations


def sides(inc_series: int, inc_here: int, cand: int, max_repeats: int, free: int) -> list[tuple[str, int]]:
    """[(role, nth)] to run at once on `free` nodes: as many repeats as the rule still allows
    (`max_repeats` measurements per side) and the nodes hold. The incumbent side has `inc_series`
    measurements (its own trial's and `inc_here` of this trial), the candidate `cand`; a side is
    topped up to cand + r as the one-node repeat does. [] where it would not spread over two nodes
    (the one-node repeat then measures both sides in turn)."""
    best: list[tuple[str, int]] = []
    for r in range(1, max_repeats - cand + 1):
        n_inc = max(0, cand + r - inc_series)
        if n_inc + r > free:
            break
        best = [("incumbent", inc_here + j) for j in range(n_inc)] + [("candidate", cand + j) for j in range(r)]
    return best if len(best) >= 2 else []
