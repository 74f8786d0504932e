"""Trials at once on the simulator (issue 18): ground time to reach 95% of the best configuration
with 1, 2, 4 and 8 workers, over several seeds, for three model/hardware pairs.

    python tests/perf/parallel_speedup.py [--seeds 6] [--workers 1,2,4,8] [--run 2,4,8 --merge FILE] [--pairs ...] [--ray] [--out FILE]

prints ONE JSON line; the recorded result lives beside this file (parallel_speedup.json).

Each run is the whole `agent optimize` loop on the sim (built-in planner, --approve auto, default
budget) driven by agent/parallel.py. Ground time is the sim's clock, never wall time: every trial's
tasks start at the driver's ground clock when submitted and end their own simulated seconds later,
and deciding a trial moves the clock to its end (so N workers = N sim nodes side by side). The
driver decides in proposal order whatever order results arrive in, so the in-process executor
(the default here: no Ray needed, deterministic) gives the same ground times as Ray; `--ray` runs
the same thing as Ray tasks on a local instance (tests/agent/test_parallel_ray.py checks the two
agree trial for trial).

Per (pair, seed): best = the value of the one-worker run's final configuration (the loop as it
runs today); a run's time-to-95% is the ground time of the first verdict after which its
incumbent's configuration was worth >= 95% of that best (a parallel run that ends below it counts
as not reaching it). A configuration's value is measured once more after the run, without the
sim's run-to-run noise, on one request sequence (true_curve): a run keeps what measured high, so
its measured best is partly its luck, and on the 2026-12-04 fit the one-worker runs' measured
finals spread 2781-3321 tok/s over seeds for GLM (the measured ratios are reported beside:
measured_time_ratio, measured_final_ratio). Reported: per worker count, the median over seeds of
time-to-95% / the one-worker run's, and the final value / the one-worker run's.
Goal (issue 18): 4 workers <= 1/3, 8 workers <= 1/5. Beside it, per worker count, path_ratio: the
ground time of the steps the run's 95% configuration was built from (winning_path), as a fraction
of the one-worker run's time to reach it: what walking the same steps one kept change at a time
costs whatever the number of nodes (on N workers an overestimate: repeats ran side by side); and
floor_ratio: the same steps' first measurements alone, with no repeat and no evals: the least time
walking these steps one trial each can take, however many nodes run them.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agent import cluster  # noqa: E402
from agent import run as runlib  # noqa: E402
from agent.config import RunConfig, Target  # noqa: E402
from agent.worker import InlineExecutor  # noqa: E402
from tools.hardware import get_hardware  # noqa: E402

# deepseek-v3/h200 cannot launch the bf16 baseline in the sim (it needs fp8 there): b300 instead
PAIRS = ("glm-5.2/mi355x", "qwen3-235b-a22b/b200", "deepseek-v3/b300")
TARGET = 0.95


def one_run(pair: str, seed: int, workers: int, work: Path, executor) -> dict:
    model, hw = pair.split("/")
    rd = work / f"{model}-{hw}-s{seed}-w{workers}"
    shutil.rmtree(rd, ignore_errors=True)
    rd.mkdir(parents=True)
    cfg = RunConfig(target=Target(model=model, hw=hw), approve="auto", seed=seed, workers=workers).check()
    rt = runlib.open_runtime(rd, cfg)
    runlib.record_start(rt)
    t0 = time.time()
    out = cluster.drive(rt, executor=executor())
    curve = rt.ledger.meta("curve") or []
    res = {"trials": out["trials"], "curve": curve, "final": (out["best"] or {}).get("objective"),
           "ground_s": rt.ledger.meta("parallel")["now"], "wall_s": round(time.time() - t0, 1),
           **where_time_goes(rt.ledger, curve), **true_curve(rt, curve, work)}
    res.update(winning_path(rt.ledger, res["true_curve"], res["final_true"]))
    rt.ledger.close()
    runlib.run_lock.release(rd)
    shutil.rmtree(rd, ignore_errors=True)
    return res


def true_curve(rt, curve: list, work: Path) -> dict:
    """The curve again with each incumbent's configuration valued without the sim's run-to-run noise
    (measured once more, noise off, on one request sequence): the measured curve's value is the
    best of the incumbent's own noisy measurements, and a run keeps what measured high, so comparing
    two runs' measured finals compares their luck as much as their search. One point per decided
    trial, in proposal order (agent/parallel.py's _commit), as where_time_goes reads it."""
    from agent.decide import objective_value
    from agent.measure import bench
    from sandboxes.sim import SimSandbox
    from tools.candidate import Candidate
    cfg, led = rt.config, rt.ledger
    hw = get_hardware(cfg.target.hw)
    value: dict[int, float] = {}
    inc, out = None, []
    for t, (ground, _) in zip(led.trials(), curve):
        if t["verdict"] == "kept":
            inc = t["id"]
            c = Candidate.model_validate(t["candidate"])
            sb = SimSandbox(cfg.target.model, cfg.target.hw, seed=0, noise=0.0, check_source=False)
            with sb.launch(c, work / "true" / f"trial-{inc}") as server:
                value[inc] = objective_value(bench(server, cfg, hw, c.parallel.gpus, 0), cfg.objective)
        out.append([ground, value.get(inc)])
    return {"true_curve": out, "final_true": value.get(inc)}


def winning_path(led, true_curve: list, final: float | None) -> dict:
    """The steps the run's configuration at its own 95% point was built from: its chain of kept
    trials back to the baseline (each built on the one before), with the failed trials each of them
    answered (a fix is proposed from its failure's log), and their measurements' ground time summed.
    On one worker those ran one after another, so a schedule that reaches that configuration by the
    same steps, one kept change at a time, takes at least that long however many nodes it has: to
    do better, a trial must carry more than one step. (On N workers a step's repeats run side by
    side, so there the sum overstates the step's time; summarize reports it for one worker.)"""
    trials = {t["id"]: t for t in led.trials()}
    t95, inc = time_to(true_curve, TARGET * (final or 0)), None
    for t, (ground, _) in zip(led.trials(), true_curve):  # one point per trial, in proposal order
        inc = t["id"] if t["verdict"] == "kept" else inc
        if t95 is not None and ground >= t95:
            break
    steps, tid = [], inc if t95 is not None else None
    while tid is not None:
        fixed = tid
        while fixed is not None:  # the trial and the failures it answered, one after another
            steps.append(fixed)
            fixed = trials[fixed]["proposal"].get("fixes_trial")
        tid = trials[tid]["incumbent_id"]
    ground = sum(m["ground_s"] or 0 for tid in steps for m in led.measurements(tid))
    # The same steps with nothing but each one's first measurement (a failed launch: its own time):
    # no repeat, no evals. Speculating on first measurements, a run with unlimited nodes could walk
    # the chain no faster than this.
    first = sum(next((m["ground_s"] or 0 for m in led.measurements(tid, "candidate")), trials[tid]["ground_s"] or 0)
                for tid in steps)
    return {"path": sorted(steps), "path_s": round(ground), "floor_s": round(first),
            "path_kept": sum(trials[t]["verdict"] == "kept" for t in steps)}


def where_time_goes(led, curve: list) -> dict:
    """Per phase: its trials, repeat rounds (each measures the incumbent again) and the ground time
    of its last verdict (one curve point per trial, in proposal order); and the trials that ran
    ahead (started before a trial of an earlier phase was decided), how many of them were kept."""
    phases: dict = {}
    trials = led.trials()
    for t, (ground, _) in zip(trials, curve):
        d = phases.setdefault(t["phase"], {"trials": 0, "repeats": 0, "decided_s": 0.0})
        d["trials"] += 1
        d["repeats"] += len(led.measurements(t["id"], "incumbent"))
        d["decided_s"] = round(ground)
    order = [t["phase"] for t in trials]
    ahead = [b for b in trials if any(a["id"] < b["id"] and order.index(a["phase"]) < order.index(b["phase"])
                                      and b["started"] is not None and a["ended"] is not None
                                      and b["started"] < a["ended"] for a in trials)]
    return {"phases": phases, "ahead": len(ahead), "ahead_kept": sum(b["verdict"] == "kept" for b in ahead)}


def time_to(curve: list, level: float) -> float | None:
    return next((t for t, best in curve if best is not None and best >= level), None)


def summarize(runs: dict, ws: list[int], executor: str, seeds: int) -> dict:
    summary: dict = {}
    for pair, by_seed in runs.items():
        # the worker counts every seed of the pair has run (a pair merged in with fewer is summarized on those)
        per_w: dict = {str(w): {"time_ratio": [], "ground_ratio": [], "final_ratio": [], "t95_s": [],
                                "measured_time_ratio": [], "measured_final_ratio": []}
                       for w in ws if all(str(w) in by_w for by_w in by_seed.values())}
        for by_w in by_seed.values():
            one = by_w[str(ws[0])]
            for curve, final, tag in (("true_curve", "final_true", ""), ("curve", "final", "measured_")):
                best = one[final] or 0
                t1 = time_to(one[curve], TARGET * best)
                for w in per_w:
                    r = by_w[w]
                    t = time_to(r[curve], TARGET * best)
                    if not tag:
                        per_w[w]["t95_s"].append(t)
                        per_w[w]["ground_ratio"].append(round(r["ground_s"] / one["ground_s"], 3))
                    # not reaching 95% of the one-worker best counts as infinitely slow, never as skipped
                    per_w[w][f"{tag}time_ratio"].append(math.inf if t is None else round(t / t1, 3))
                    per_w[w][f"{tag}final_ratio"].append(round((r[final] or 0) / best, 3) if best else None)
        for d in per_w.values():
            d["median_time_ratio"] = statistics.median(d["time_ratio"])
            d["median_final_ratio"] = statistics.median([x for x in d["final_ratio"] if x is not None])
            for k in ("time_ratio", "measured_time_ratio"):
                d[k] = [x if math.isfinite(x) else "not reached" for x in d[k]]
        # Each run's own chain of steps to its 95% point, over the one-worker run's time to its own
        # (t95_s, seed by seed): where a parallel run's is near its time_ratio it wasted little
        # waiting, and only trials carrying several steps at once can go lower.
        t1s = per_w[str(ws[0])]["t95_s"]
        for w in per_w:
            rs = [by_w[w] for by_w in by_seed.values()]
            for k in ("path", "floor"):
                if all(f"{k}_s" in r for r in rs):
                    per_w[w][f"{k}_ratio"] = [round(r[f"{k}_s"] / t, 3) if t else None for r, t in zip(rs, t1s)]
        summary[pair] = per_w
    goal = {"4": 1 / 3, "8": 1 / 5}
    met = {w: all(w in summary[p] and summary[p][w]["median_time_ratio"] <= g for p in summary) for w, g in goal.items()
           if str(w) in map(str, ws)}
    for per_w in summary.values():
        for d in per_w.values():
            if not math.isfinite(d["median_time_ratio"]):
                d["median_time_ratio"] = "not reached"
    return {"benchmark": "parallel_speedup", "target": TARGET, "seeds": seeds, "workers": ws,
            "executor": executor, "goal": {"4": "<= 1/3", "8": "<= 1/5"}, "goal_met": met, "summary": summary,
            "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--pairs", default=",".join(PAIRS))
    ap.add_argument("--ray", action="store_true", help="Ray tasks on a local instance instead of in process")
    ap.add_argument("--out")
    ap.add_argument("--merge", help="result files of earlier invocations whose runs join this summary")
    ap.add_argument("--run", help="the worker counts to run now (default: all of --workers); the others' runs come "
                                  "from --merge (e.g. one worker, whose path a change to the driver did not touch)")
    a = ap.parse_args()
    ws = [int(w) for w in a.workers.split(",")]
    now = [int(w) for w in a.run.split(",") if w] if a.run is not None else ws  # --run "": summarize --merge only
    if a.ray:
        import ray
        ray.init(num_cpus=2, resources={cluster.RESOURCE: max(ws)}, include_dashboard=False, log_to_driver=False)
        executor = lambda: cluster.RayExecutor(max(ws))  # noqa: E731
    else:
        executor = InlineExecutor
    work = Path(tempfile.mkdtemp(prefix="parallel-speedup-"))
    runs: dict = {}
    for f in filter(None, (a.merge or "").split(",")):  # runs recorded by earlier invocations
        runs.update(json.loads(Path(f).read_text())["runs"])
    for pair in filter(None, a.pairs.split(",")):
        for seed in range(a.seeds):
            for w in now:
                r = one_run(pair, seed, w, work, executor)
                runs.setdefault(pair, {}).setdefault(str(seed), {})[str(w)] = {
                    k: r[k] for k in ("ground_s", "final", "final_true", "trials", "wall_s", "ahead", "ahead_kept",
                                      "phases", "curve", "true_curve", "path", "path_s", "floor_s", "path_kept")}
                print(f"{pair} seed {seed} workers {w}: ground {r['ground_s']:.0f} s, final {r['final']}, "
                      f"{r['trials']} trials ({r['ahead']} ahead, {r['ahead_kept']} of them kept), wall {r['wall_s']} s; "
                      "phases decided at " + ", ".join(f"{ph} {d['decided_s']}" for ph, d in r["phases"].items()),
                      file=sys.stderr)
                if a.out:  # every finished run on disk at once: a crash or a kill loses none of them
                    Path(a.out).write_text(json.dumps({"partial": True, "runs": runs}) + "\n")
    out = summarize(runs, ws, "ray" if a.ray else "inline", a.seeds)
    line = json.dumps(out)
    print(line)
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
