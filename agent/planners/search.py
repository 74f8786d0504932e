"""Numeric flag search with Optuna TPE, rebuilt from the ledger on every call.

The study is never stored: each finished search trial of the ledger is told to a fresh in-memory
study (failed launches as infeasible through the trial's constraint values, so TPE steers away
from the failing region), then the sampler, seeded by the history's length, asks for the next point.
A resumed run therefore asks exactly what the original would have asked.
"""
from __future__ import annotations

import math

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import TPESampler
from optuna.trial import TrialState, create_trial

from tools.frameworks.base import INT_TYPES

optuna.logging.set_verbosity(optuna.logging.WARNING)


def distributions(specs: dict) -> dict:
    """FlagSpec.search -> Optuna distributions, for numeric flags only."""
    out = {}
    for name, s in specs.items():
        sr = s.search or {}
        if "choices" in sr:
            out[name] = CategoricalDistribution(list(sr["choices"]))
        elif s.type in INT_TYPES:
            out[name] = IntDistribution(int(sr["low"]), int(sr["high"]), log=bool(sr.get("log")))
        elif s.type == "float":
            out[name] = FloatDistribution(float(sr["low"]), float(sr["high"]), log=bool(sr.get("log")))
    return out


def ask(dists: dict, history: list[tuple[dict, float | None]], *, seed: int, tried: set[str],
        startup: int = 3) -> dict | None:
    """The next parameter set; history holds (params, objective or None for a failed launch).
    Points already tried are asked again (a few times) rather than measured twice."""
    if not dists:
        return None
    study = optuna.create_study(direction="maximize", sampler=TPESampler(
        seed=seed + len(history), n_startup_trials=startup, multivariate=True))
    for params, value in history:
        p = {k: v for k, v in params.items() if k in dists and dists[k]._contains(dists[k].to_internal_repr(v))}
        if set(p) != set(dists):
            continue
        failed = value is None or not math.isfinite(value)
        study.add_trial(create_trial(params=p, distributions=dists, state=TrialState.COMPLETE,
                                     value=0.0 if failed else float(value),
                                     constraints={"launched": 1.0 if failed else 0.0}))
    for _ in range(8):
        t = study.ask(dists)
        params = dict(t.params)
        if _key(params) not in tried:
            return params
        study.tell(t, state=TrialState.FAIL)
    return None


def _key(params: dict) -> str:
    return repr(sorted(params.items()))


def key(params: dict) -> str:
    return _key(params)
