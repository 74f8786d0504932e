"""Optuna TPE over numeric flags, rebuilt from the ledger's history: failed launches are infeasible,
so the search steers away from the region where launches fail; asks are reproducible; no deprecated
Optuna API is used (FutureWarnings are errors here)."""
import warnings

from optuna.distributions import IntDistribution

from agent.planners import search

D = {"--max-num-seqs": IntDistribution(1, 100)}
HISTORY = [({"--max-num-seqs": x}, None if x > 50 else float(x)) for x in (5, 15, 25, 35, 45, 55, 65, 75, 85, 95)]


def test_search_avoids_the_failing_region_and_is_reproducible():
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        asks = [search.ask(D, HISTORY, seed=s, tried=set())["--max-num-seqs"] for s in range(10)]
    assert sum(a <= 55 for a in asks) >= 8, asks
    assert asks == [search.ask(D, HISTORY, seed=s, tried=set())["--max-num-seqs"] for s in range(10)]


def test_points_already_tried_are_not_asked_again():
    tried = {search.key(p) for p, _ in HISTORY}
    for s in range(5):
        p = search.ask(D, HISTORY, seed=s, tried=tried)
        assert p is None or search.key(p) not in tried
