"""Search efficiency on the simulator: how many launched trials each strategy needs before one of
them reaches 95% of the best configuration of a defined search space (the best found by measuring
every point of the space).

    python tests/perf/search_efficiency.py [--seeds 10] [--pairs glm-5.2/mi355x,...] [--out FILE]

prints ONE JSON line; the recorded result lives beside this file (search_efficiency.json).

The space (per model/hardware pair; sglang, the pair's natively supported low-precision weights,
no speculative decoding, the story's throughput workload, objective = knee tok/s/node under the
TTFT SLO): parallel layout (TP 8/4/2/1 x DP to fill the node, expert parallelism on/off for TP>1)
x --kv-cache-dtype {auto, fp8_e4m3} x --chunked-prefill-size {-1, 2048, 4096, 8192, 16384} x
--max-running-requests {16, 64, 256, 1024} x (AMD only) --enable-aiter-allreduce-fusion {off, on}.

Strategies, each counting distinct launches (a failed launch counts; a repeated point does not):
- grid: the space in nested-loop order, as vLLM's auto_tune walks its grid (one fixed order);
- random: uniform sampling without replacement, one permutation per seed;
- tpe: Optuna's TPESampler alone over the same dimensions (categorical), seeded; failures FAIL;
- builtin: agent/planners/builtin.py, started from the framework defaults at TP8 with the phase set
  to "flags" (framework/precision/speculative are fixed by the space), driven through its own
  flags and parallel phases; its keep rule here is "beats the incumbent by more than the 2% noise
  floor" (the loop's decide.py also repeats within-noise gaps; the sim's noise is 2%). It may
  propose points outside the space (TPE over numeric flags); those are measured on the sim too.
- variant_parallel_first: for comparison only, the same built-in planner with the parallel phase
  moved before the flags phase (a subclass here; the shipped planner is unchanged).
Every point is measured once on the sim without its run-to-run noise and on one request sequence
(the same bench seed for every point), so all strategies see the same number for the same
configuration, and the space's best is the best configuration, not the luckiest draw: with noise
the best of 560 noisy points was inflated by the largest of 560 draws (on the 2026-12-04 fit
qwen's "best" was the very configuration the built-in planner measured, 6.6% higher under another
key), and 95% of it was out of reach of anything that measured it once.
"""
from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import random
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import optuna  # noqa: E402

from agent.config import RunConfig, Target  # noqa: E402
from agent.decide import objective_value  # noqa: E402
from agent.measure import bench  # noqa: E402
from agent.planners.base import PlanContext, Proposal  # noqa: E402
from agent.planners.builtin import BuiltinPlanner  # noqa: E402
from tools.candidate import Candidate, Parallel  # noqa: E402
from tools.hardware import get_hardware  # noqa: E402
from tools.models import get_model  # noqa: E402
from tools.protocols import LaunchFailure  # noqa: E402

PAIRS = ("glm-5.2/mi355x/mxfp4", "deepseek-v3/h200/fp8", "qwen3-235b-a22b/b200/fp8")
TARGET = 0.95
NOISE = 0.02  # the built-in planner's keep rule here: beat the incumbent by more than the loop's noise floor
BENCH_SEED = 0  # one request sequence for every point
BUILTIN_MAX = 80


class Ground:
    """Measures candidates on the sim, once each (cached), seeded by the candidate."""

    def __init__(self, model: str, hw: str, work: Path):
        from sandboxes.sim import SimSandbox
        self.SimSandbox = SimSandbox
        self.card, self.hw = get_model(model), get_hardware(hw)
        self.cfg = RunConfig(target=Target(model=model, hw=hw))
        self.work = work
        self.cache: dict[str, float | None] = {}
        self.data: dict[str, dict] = {}

    def value(self, c: Candidate) -> float | None:
        k = c.key()
        if k not in self.cache:
            seed = int(hashlib.sha256(k.encode()).hexdigest()[:8], 16)
            sb = self.SimSandbox(self.card, self.hw, seed=seed, noise=0.0)
            try:
                with sb.launch(c, self.work) as server:
                    d = bench(server, self.cfg, self.hw, c.parallel.gpus, BENCH_SEED)
                self.cache[k], self.data[k] = objective_value(d, "knee"), d
            except LaunchFailure:
                self.cache[k] = None
        return self.cache[k]


def space(card, hw, weights: str) -> tuple[dict, list[Candidate]]:
    n = hw.gpus_per_node
    par = [(tp, ep) for tp in (8, 4, 2, 1) if n % tp == 0 and card.num_attention_heads % tp == 0
           for ep in ((False, True) if tp > 1 else (False,))]
    dims = {"parallel": par, "--kv-cache-dtype": ["auto", "fp8_e4m3"],
            "--chunked-prefill-size": [-1, 2048, 4096, 8192, 16384], "--max-running-requests": [16, 64, 256, 1024]}
    if hw.vendor == "amd":
        dims["--enable-aiter-allreduce-fusion"] = [False, True]
    pts = []
    for combo in itertools.product(*dims.values()):
        (tp, ep), *vals = combo
        flags = {k: v for k, v in zip(list(dims)[1:], vals)}
        pts.append(point(weights, tp, n // tp, ep, flags))
    return dims, pts


def point(weights, tp, dp, ep, flags) -> Candidate:
    """A candidate written the way the built-in planner writes it (defaults left out), so the same
    configuration has the same key whoever proposes it."""
    defaults = {"--kv-cache-dtype": "auto", "--chunked-prefill-size": None, "--enable-aiter-allreduce-fusion": False}
    f = {k: v for k, v in flags.items() if v is not None and v is not False and defaults.get(k, object()) != v}
    return Candidate(framework="sglang", weights=weights, parallel=Parallel(tp=tp, dp=dp, ep=ep), flags=f)


def reach(values: list[float | None], threshold: float) -> int | None:
    """1-based count of launches until the first value >= threshold (None: never)."""
    for i, v in enumerate(values):
        if v is not None and v >= threshold:
            return i + 1
    return None


def run_tpe(dims: dict, lookup, seed: int, threshold: float, limit: int) -> int | None:
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    seen: dict[tuple, float | None] = {}
    launches, asks = 0, 0
    while launches < limit and asks < limit * 20:
        asks += 1
        t = study.ask()
        key = tuple(t.suggest_categorical(k, list(range(len(v)))) for k, v in dims.items())
        if key not in seen:
            seen[key] = lookup(key)
            launches += 1
            if seen[key] is not None and seen[key] >= threshold:
                return launches
        v = seen[key]
        if v is None:
            study.tell(t, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(t, v)
    return None


class ParallelFirst(BuiltinPlanner):
    """A VARIANT, measured for comparison only (not the shipped planner): the same phases and
    proposals, with the parallel layout searched before the flags."""
    ORDER = ("framework", "precision", "speculative", "parallel", "flags", "moe")

    def propose(self, ctx):
        phase = max((t["phase"] for t in ctx.trials if t["phase"] in self.ORDER), key=self.ORDER.index)
        tried = ctx.tried_keys()
        fix = self._answer_failures(ctx, phase, tried)
        if fix is not None:
            return fix
        for ph in self.ORDER[self.ORDER.index(phase):]:
            for p in getattr(self, f"_{ph}")(ctx):
                if p.kind == "moe_tune" or p.candidate.key() not in tried:
                    return p
        return Proposal(kind="stop", phase=phase, description="every phase is exhausted")


def run_builtin(g: Ground, weights: str, seed: int, threshold: float, variant: bool = False) -> dict:
    planner = ParallelFirst() if variant else BuiltinPlanner()
    cfg = g.cfg.model_copy(update={"seed": seed})
    trials: list[dict] = []
    meas: dict[int, list[dict]] = {}
    base = point(weights, 8, 1, False, {})
    inc_id, inc_v, best, reached = None, None, 0.0, None
    prop_cand, phase, kind, desc = base, "parallel" if variant else "flags", "config", "baseline"
    proposal, rationale = {"params": {}, "fixes_trial": None}, "measure the starting point"
    while len(trials) < BUILTIN_MAX:
        v = g.value(prop_cand)
        tid = len(trials) + 1
        # A trial row as agent/ledger.py stores it (nodes.propose records the proposal and its rationale).
        t = {"id": tid, "phase": phase, "kind": kind, "description": desc, "rationale": rationale,
             "candidate": prop_cand.model_dump(mode="json"), "incumbent_id": inc_id, "proposal": proposal,
             "outcome": "launched" if v is not None else "launch_failed",
             "diagnoses": [] if v is not None else [{"kind": "oom", "message": "launch failed", "evidence": [], "details": {}, "fatal": True}],
             "reason": "", "reason_code": None, "status": "done", "numbers": {}, "log_excerpt": "", "patch_id": None}
        if v is None:
            t["verdict"] = "failed"
        elif inc_v is None or v > inc_v * (1 + NOISE):
            t["verdict"], inc_id, inc_v = "kept", tid, v
        else:
            t["verdict"] = "reverted"
        meas[tid] = [{"role": "candidate", "data": g.data.get(prop_cand.key(), {})}] if v is not None else []
        trials.append(t)
        best = max(best, v or 0.0)
        if reached is None and v is not None and v >= threshold:
            reached = tid
            break
        ctx = PlanContext(config=cfg, card=g.card, hw=g.hw, trials=trials, measurements=lambda i: meas.get(i, []),
                          incumbent_id=inc_id, frameworks=("sglang",), source_tree=_no_tree)
        p = planner.propose(ctx)
        if p.kind != "config":  # stop (or a MoE tuning run, outside this space): the planner is done
            break
        prop_cand, phase, kind, desc = p.candidate, p.phase, p.kind, p.description
        proposal, rationale = p.model_dump(mode="json"), p.rationale
    return {"reached": reached, "launches": len(trials), "best_fraction": best / (threshold / TARGET)}


def _no_tree(fw):
    raise NotImplementedError("no source tree in this benchmark")


def summarize(xs: list[int | None], size: int) -> dict:
    got = [x for x in xs if x is not None]
    pen = [x if x is not None else size for x in xs]  # never reached: charged the whole space
    return {"per_seed": xs, "mean": round(statistics.mean(got), 2) if got else None,
            "mean_unreached_as_space_size": round(statistics.mean(pen), 2),
            "median": statistics.median(got) if got else None, "reached": f"{len(got)}/{len(xs)}",
            "mean_fraction_of_space": round(statistics.mean(got) / size, 4) if got else None}


def one_pair(spec: str, seeds: int, work: Path, say) -> dict:
    model, hw, weights = spec.split("/")
    g = Ground(model, hw, work / model.replace("/", "_"))
    dims, pts = space(g.card, g.hw, weights)
    t0 = time.time()
    vals = [g.value(c) for c in pts]
    say(f"{spec}: measured all {len(pts)} points in {time.time() - t0:.0f} s")
    best_i = max(range(len(pts)), key=lambda i: vals[i] or 0.0)
    best = vals[best_i]
    thr = TARGET * best
    names = list(dims)

    def lookup(key: tuple) -> float | None:
        (tp, ep) = dims["parallel"][key[0]]
        flags = {k: dims[k][i] for k, i in zip(names[1:], key[1:])}
        return g.value(point(weights, tp, g.hw.gpus_per_node // tp, ep, flags))

    grid = reach(vals, thr)
    rnd, tpe, bi, pf = [], [], [], []
    for s in range(seeds):
        order = list(range(len(pts)))
        random.Random(s).shuffle(order)
        rnd.append(reach([vals[i] for i in order], thr))
        tpe.append(run_tpe(dims, lookup, s, thr, len(pts)))
        bi.append(run_builtin(g, weights, s, thr))
        pf.append(run_builtin(g, weights, s, thr, variant=True))
    bc = pts[best_i]
    return {"pair": spec, "space_size": len(pts), "dims": {k: [list(x) if isinstance(x, tuple) else x for x in v]
                                                          for k, v in dims.items()},
            "best_knee_tok_s": round(best, 1), "threshold_tok_s": round(thr, 1),
            "best_config": {"parallel": bc.parallel.model_dump(), "flags": bc.flags},
            "default_knee_tok_s": round(g.value(point(weights, 8, 1, False, {})) or 0.0, 1),
            "points_at_or_above_threshold": sum(1 for v in vals if v is not None and v >= thr),
            "failed_points": sum(1 for v in vals if v is None),
            "grid": grid, "random": summarize(rnd, len(pts)), "tpe": summarize(tpe, len(pts)),
            "builtin": {**summarize([b["reached"] for b in bi], len(pts)),
                        "best_fraction_per_seed": [round(b["best_fraction"], 3) for b in bi],
                        "launches_per_seed": [b["launches"] for b in bi]},
            "variant_parallel_first": {**summarize([b["reached"] for b in pf], len(pts)),
                                       "launches_per_seed": [b["launches"] for b in pf]}}


def sim_fingerprint() -> dict:
    """Which simulator produced these numbers: the repo's HEAD and a hash of the sim's sources
    (the sim is work in progress; a different sim gives different numbers)."""
    import subprocess
    h = hashlib.sha256()
    for f in sorted((REPO / "sandboxes" / "sim").rglob("*.py")) + sorted((REPO / "tools" / "frameworks").glob("*.py")):
        h.update(f.read_bytes())
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    return {"head": head, "sim_sources_sha256": h.hexdigest()[:16]}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--pairs", default=",".join(PAIRS))
    ap.add_argument("--out", default=None, help="also write the JSON line to this file")
    a = ap.parse_args(argv)
    t0, sim = time.time(), sim_fingerprint()  # before measuring: the sources this process imported
    say = lambda m: print(m, file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        pairs = [one_pair(p, a.seeds, Path(tmp), say) for p in a.pairs.split(",")]
    ratios, vs_tpe = [], []
    for p in pairs:
        b, t = p["builtin"]["mean"], p["tpe"]["mean"]
        ratios.append(b / p["grid"] if b and p["grid"] else None)
        vs_tpe.append(b is not None and t is not None and b <= t and p["builtin"]["reached"] == f"{a.seeds}/{a.seeds}")
    target = all(r is not None and r <= 0.2 for r in ratios) and all(vs_tpe)
    variant = [{"over_grid": round(p["variant_parallel_first"]["mean"] / p["grid"], 3)
                if p["variant_parallel_first"]["mean"] and p["grid"] else None,
                "at_most_tpe": bool(p["variant_parallel_first"]["mean"] and p["tpe"]["mean"]
                                    and p["variant_parallel_first"]["mean"] <= p["tpe"]["mean"])} for p in pairs]
    out = {"benchmark": "search_efficiency", "sim": sim, "target_fraction": TARGET, "seeds": a.seeds, "pairs": pairs,
           "builtin_over_grid": [round(r, 3) if r is not None else None for r in ratios],
           "builtin_at_most_tpe": vs_tpe,
           # TPE's spread over seeds is wide (5-25 launches on glm): the median is the sterner check.
           "builtin_at_most_tpe_median": [p["builtin"]["median"] is not None and p["tpe"]["median"] is not None
                                          and p["builtin"]["median"] <= p["tpe"]["median"] for p in pairs],
           "target": "builtin <= grid/5 and builtin <= tpe (mean over the seeds that reached) on every pair",
           "target_met": target, "variant_parallel_first": variant,
           "wall_s": round(time.time() - t0, 1)}
    line = json.dumps(out)
    print(line)
    if a.out:
        Path(a.out).write_text(line + "\n")
    return out


if __name__ == "__main__":
    main()
