"""Numeric flag search with Optuna TPE, rebuilt from the ledger on every call.

The study is never stored: each finished search trial of the ledger is told to a fresh in-memory
study (failed launches as infeasible through the trial's constraint values, so TPE steers away
from the failing region), then the sampler, seeded by the history's length, asks for the next point.
A resumed run therefore asks exactly what the original would have asked. Numeric flags are
searched on a human grid (agent/planners/grid.py): every value asked is one a person would type.
"""
from __future__ import annotations

import math

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.samplers import TPESampler
from optuna.trial import TrialState, create_trial

from agent.planners.grid import Dim, dim
from tools.frameworks.base import INT_TYPES

optuna.logging.set_verbosity(optuna.logging.WARNING)


def distributions(specs: dict) -> dict[str, Dim]:
    """FlagSpec.search -> the search's dimensions, for numeric flags only, on the human grid."""
    out = {}
    for name, s in specs.items():
        sr = s.search or {}
        if "choices" in sr:
            out[name] = Dim(CategoricalDistribution(list(sr["choices"])))
        elif s.type in INT_TYPES:
            out[name] = dim("int", sr["low"], sr["high"], log=bool(sr.get("log")))
        elif s.type == "float":
            out[name] = dim("float", float(sr["low"]), float(sr["high"]), log=bool(sr.get("log")))
    return out


def ask(dims: dict, history: list[tuple[dict, float | None]], *, seed: int, tried: set[str],
        startup: int = 3, pending: list[dict] = ()) -> dict | None:
    """The next parameter set (flag values); history holds (params, objective or None for a failed
    launch). `dims` maps a flag to a Dim, or to a bare Optuna distribution (searched as it is).
    Points already tried are asked again (a few times) rather than measured twice. `pending` are
    points being measured now (agent/parallel.py): told as running trials to a constant-liar TPE,
    which treats them as bad results, so a batch spreads out instead of asking one point N times."""
    if not dims:
        return None
    dims = {k: d if isinstance(d, Dim) else Dim(d) for k, d in dims.items()}
    dists = {k: d.dist for k, d in dims.items()}
    study = optuna.create_study(direction="maximize", sampler=TPESampler(
        seed=seed + len(history) + len(pending), n_startup_trials=startup, multivariate=True,
        constant_liar=bool(pending)))
    for params, value in [*history, *((p, _RUNNING) for p in pending)]:
        p = {}
        for k, d in dims.items():  # a recorded value off the grid (an older run) counts at its nearest point
            x = d.encode(params[k]) if k in params and not isinstance(d.dist, CategoricalDistribution) \
                else params.get(k)
            if x is not None and d.dist._contains(d.dist.to_internal_repr(x)):
                p[k] = x
        if set(p) != set(dims):
            continue
        if value is _RUNNING:
            study.add_trial(create_trial(params=p, distributions=dists, state=TrialState.RUNNING))
            continue
        failed = value is None or not math.isfinite(value)
        study.add_trial(create_trial(params=p, distributions=dists, state=TrialState.COMPLETE,
                                     value=0.0 if failed else float(value),
                                     constraints={"launched": 1.0 if failed else 0.0}))
    for _ in range(8):
        t = study.ask(dists)
        params = {k: dims[k].decode(v) for k, v in t.params.items()}
        if _key(params) not in tried:
            return params
        study.tell(t, state=TrialState.FAIL)
    return None


_RUNNING = object()  # a pending point's value marker


def _key(params: dict) -> str:
    return repr(sorted(params.items()))


def key(params: dict) -> str:
    return _key(params)
