"""Calibrate the simulated node on measured public benchmarks and the story:

    python -m sandboxes.sim.calibrate            # fit, cross-validate, write calibration.json, print
    python -m sandboxes.sim.calibrate --check    # only evaluate the shipped table and print

Reads ../shared/data/public-benchmarks/points.json (or $INFERLOOP_SHARED/...), runs the simulator on
every point that maps onto it (sandboxes/sim/points.py says why the others do not), fits the
per-(framework, vendor[, version]) parameters of sandboxes/sim/table.py by least squares on log
error, and writes the table the simulator ships together with the error summary it reproduces.
A few minutes on a laptop core: the engine runs each point in milliseconds and the fit iterates
on the closed-form steady state, corrected by its ratio to the engine.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from sandboxes.sim import calib_fit as F
from sandboxes.sim import table
from sandboxes.sim.calib_run import (STORY, STORY_SOURCE, ctx_for_case, ctx_for_story, run_case, run_story,
                                     surrogate)
from sandboxes.sim.points import cases
from tools.atomic import write_whole
from tools.hardware import get_hardware

REPO = Path(__file__).resolve().parents[2]
ROUNDS = 4  # fit -> engine -> correct: the corrections settle after three or four (the story knees move the most)


def points_path() -> Path:
    shared = Path(os.environ["INFERLOOP_SHARED"]) if os.environ.get("INFERLOOP_SHARED") else REPO.parent / "shared"
    return shared / "data" / "public-benchmarks" / "points.json"


def load_cases(path: Path | None = None):
    return cases(json.loads((path or points_path()).read_text()))


def items_for(cs) -> list[F.Item]:
    out = []
    for c in cs:
        ctx = ctx_for_case(c)
        out += [F.Item(c.id, c.group, ctx, m, v, c.source, c.model) for m, v in c.measured.items()]
    for f in STORY:
        row = f"sglang/{get_hardware(f.hw).vendor}"
        out.append(F.Item(f.id, row, ctx_for_story(f), f.metric, f.value, STORY_SOURCE, "glm-5.2"))
        if f.knee_rps:
            out.append(F.Item(f.id, row, ctx_for_story(f), "knee_rps", f.knee_rps, STORY_SOURCE, "glm-5.2"))
    return out


def engine_eval(cs, tbl: dict, only: set[str] | None = None) -> dict[str, dict]:
    """The engine's prediction of every case and story figure under `tbl`."""
    with table.using(tbl):
        out = {c.id: run_case(c) for c in cs if only is None or c.id in only}
        out.update({f.id: run_story(f) for f in STORY if only is None or f.id in only})
    return out


def corrections(items, tbl, eng) -> np.ndarray:
    sur = F.predict(items, tbl)
    return np.array([(eng[it.key].get(it.metric) or s) / s for it, s in zip(items, sur)])


def error_rows(cs, eng) -> list[dict]:
    rows = []
    for c in (c for c in cs if c.id in eng):
        e = eng[c.id]
        r = {"id": c.id, "group": c.group, "hwgroup": f"{c.framework}/{c.hw}", "load": c.load, "model": c.model,
             "source": c.source, "refused": list(c.refused) + ([e["refused"]] if "refused" in e else [])}
        r.update({m: (e.get(m), v) for m, v in c.measured.items()})
        rows.append(r)
    for f in (f for f in STORY if f.id in eng):
        rows.append({"id": f.id, "group": "story", "hwgroup": f"sglang/{f.hw}", "load": "story", "model": "glm-5.2",
                     "source": STORY_SOURCE, "story": True, "refused": [], f.metric: (eng[f.id].get(f.metric), f.value),
                     **({"knee_rps": (eng[f.id].get("knee_rps"), f.knee_rps)} if f.knee_rps else {})})
    return rows


def calibrate(cs, keep: dict, say=print, pool_weight: float = F.POOL_WEIGHT) -> tuple[dict, dict]:
    """Fit on all cases; returns (table, report with the per-point rows and cross-validation)."""
    items = items_for(cs)
    layout = F.Layout(sorted({it.row for it in items}), pool_weight)
    x = layout.x0(keep)
    tbl = layout.table(x, keep)
    eng = engine_eval(cs, tbl)
    for k in range(ROUNDS):
        corr = corrections(items, tbl, eng)
        x = F.fit(items, corr, layout, keep, x)
        tbl = layout.table(x, keep)
        eng = engine_eval(cs, tbl)
        say(f"round {k + 1}: {F.summarize(error_rows(cs, eng))}")
    return tbl, {"rows": error_rows(cs, eng), "cv": cross_validation(cs, items, tbl, eng, layout, keep, x)}


def cross_validation(cs, items, tbl, eng, layout, keep, x) -> dict:
    """Both hold-out schemes from the fit `x` (its table `tbl`, the engine's predictions `eng`)."""
    corr = corrections(items, tbl, eng)
    return {"leave_one_source_out": cross_validate(cs, items, corr, layout, keep, x, "source"),
            "leave_one_model_out": cross_validate(cs, items, corr, layout, keep, x, "model")}


def cross_validate(cs, items, corr, layout, keep, x_full, by: str) -> dict:
    """Refit without each source (or model) and predict its points with the engine."""
    held: list[dict] = []
    per: dict[str, dict] = {}
    for g in sorted({getattr(it, by) for it in items}):
        train = [i for i, it in enumerate(items) if getattr(it, by) != g]
        x = F.fit([items[i] for i in train], corr[train], layout, keep, x_full, max_nfev=25)
        ids = {it.key for it in items if getattr(it, by) == g}
        eng = engine_eval(cs, layout.table(x, keep), only=ids)
        rows = error_rows(cs, eng)
        held += rows
        per[g] = F.summarize(rows)
    return {"overall": F.summarize(held), "folds": per, "rows": held}


def held_out_groups(cv: dict) -> dict:
    """The spread of each framework x hardware group's points where they were held out of the fit
    (their source, and their model, each left out in turn): what a configuration the fit never saw
    should expect, which the in-sample spread understates (`agent estimate` prints the larger)."""
    return F.group_spread([r for scheme in cv.values() for r in scheme["rows"]])


def recorded(cv: dict) -> dict:
    """What calibration.json keeps of a cross-validation: its summaries and held-out bands."""
    return {"cv": {k: v["overall"] for k, v in cv.items()}, "groups_held_out": held_out_groups(cv)}


def cv_of_shipped(cs, keep: dict, eng: dict, pool_weight: float) -> dict:
    """Cross-validate the shipped table `keep` (the engine's predictions under it: `eng`) as it is,
    without refitting it (its rows and predictions stay exactly as shipped): each fold refits from
    the shipped values, as a full calibration's folds do from its fit."""
    items = items_for(cs)
    layout = F.Layout(sorted({it.row for it in items}), pool_weight)
    return cross_validation(cs, items, keep, eng, layout, keep, layout.x0(keep))


# ---- printing ---------------------------------------------------------------------------------
def _pct(e):
    return "    -" if e is None else f"{e * 100:+5.0f}%"


def print_report(rep: dict, say=print) -> None:
    say(f"{'point':6} {'group':18} {'model':18} {'load':7} {'tok/s meas':>10} {'pred':>8} {'err':>6} "
        f"{'TPOT err':>8} {'TTFT err':>8}  refused flags")
    for r in rep["rows"]:
        m = "output_tok_s" if "output_tok_s" in r else next(k for k in ("knee_tok_s", "single_stream_tok_s") if k in r)
        pred, meas = r[m]
        say(f"{r['id']:6} {r['hwgroup']:18} {r['model']:18} {r['load']:7} {meas:10.1f} {pred or 0:8.1f} "
            f"{_pct(F.err(pred, meas))} {_pct(F.err(*r['tpot_s'])) if 'tpot_s' in r else '    -':>8} "
            f"{_pct(F.err(*r['ttft_s'])) if 'ttft_s' in r else '    -':>8}  {', '.join(r['refused'])[:80]}")
    say("\nby framework x hardware x load (median |error|, n):")
    keys = sorted({(r["hwgroup"], r["load"]) for r in rep["rows"]})
    for g, load in keys:
        rs = [r for r in rep["rows"] if (r["hwgroup"], r["load"]) == (g, load)]
        s = F.summarize([{**r, "story": False} for r in rs])
        say(f"  {g:18} {load:7} n={len(rs):2}  tok/s {_pct(s['tput_median'])}  TPOT {_pct(s['tpot_median'])}"
            f"  TTFT {_pct(s['ttft_median'])}  (pred/meas geomean {s['tput_geomean_ratio']})")
    for name, cv in rep.get("cv", {}).items():
        say(f"\ncross-validation, {name.replace('_', ' ')}: {cv['overall']}")
        for g, s in cv["folds"].items():
            say(f"  held out {g:40} tok/s {_pct(s['tput_median'])} within30 {s['tput_within_30']}  "
                f"TPOT {_pct(s['tpot_median'])}  TTFT {_pct(s['ttft_median'])}  story {s['story_max']}")


def targets(summary: dict, refusals: int) -> list[tuple[str, bool]]:
    s = summary
    return [("throughput median error <= 15%", (s["tput_median"] or 1) <= 0.15),
            (">= 80% of throughput within 30%", (s["tput_within_30"] or 0) >= 0.80),
            ("TPOT median error <= 15%", (s["tpot_median"] or 1) <= 0.15),
            ("TTFT median error <= 30%", (s["ttft_median"] or 1) <= 0.30),
            ("story figures within 12%", (s["story_max"] or 1) <= 0.12),
            ("no refusal of a configuration that ran", refusals == 0)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sandboxes.sim.calibrate", description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="evaluate the shipped table only (no fit, no write)")
    mode.add_argument("--cv-only", action="store_true",
                      help="cross-validate the shipped table without refitting it, and rewrite only its "
                           "cross-validation summaries and held-out bands (its rows, and every prediction, stay)")
    ap.add_argument("--points", type=Path, default=None, help="points.json (default: the shared folder's)")
    ap.add_argument("--pool-weight", type=float, default=F.POOL_WEIGHT, metavar="W",
                    help=f"how hard each stack's parameters are drawn to their pool across stacks (default "
                         f"{F.POOL_WEIGHT}, chosen by cross-validation; 0: no pull, so a parameter the data do not reach "
                         f"is left wherever the solver puts it)")
    a = ap.parse_args(argv)
    if a.pool_weight < 0:
        print(f"--pool-weight {a.pool_weight}: must be >= 0", file=sys.stderr)
        return 2
    path = a.points or points_path()
    if not path.is_file():
        print(f"no public benchmark points at {path} (set INFERLOOP_SHARED)", file=sys.stderr)
        return 2
    t0 = time.time()
    cs, skipped = load_cases(path)
    keep = table.reload()
    shipped = engine_eval(cs, keep)
    before = F.summarize(error_rows(cs, shipped))
    print(f"{len(cs)} points map onto the sim; {len(skipped)} out of scope:")
    for k, why in skipped.items():
        print(f"  {k}: {why}")
    print(f"shipped table: {before}")
    if a.check or a.cv_only:
        rep = {"rows": error_rows(cs, shipped)}
        tbl = keep
        if a.cv_only:
            rep["cv"] = cv_of_shipped(cs, keep, shipped, keep.get("pool_weight", a.pool_weight))
    else:
        tbl, rep = calibrate(cs, keep, pool_weight=a.pool_weight)
    summary = F.summarize(rep["rows"])
    refused = [r for r in rep["rows"] if r["refused"]]
    print_report(rep)
    print(f"\nsummary: {summary}")
    print(f"refusals of configurations that ran: {len(refused)} points "
          f"({sum(1 for r in refused if any('out of memory' in x for x in r['refused']))} by the sim, the rest by the "
          f"flag tables of tools/frameworks); flags: {sorted({f for r in refused for f in r['refused']})}")
    for name, ok in targets(summary, len(refused)):
        print(f"  [{'met' if ok else 'NOT met'}] {name}")
    if a.cv_only:
        tbl = {**keep, **recorded(rep["cv"])}
    elif not a.check:
        tbl = {**tbl, "note": "written by python -m sandboxes.sim.calibrate; do not edit by hand",
               "summary": summary, "before": before, "pool_weight": a.pool_weight, "groups": F.group_spread(rep["rows"]),
               **recorded(rep["cv"]), "points_file": str(path.name)}
    if not a.check:
        # whole or absent: a simulator reading it never sees half a file
        write_whole(table.TABLE_PATH, json.dumps(tbl, indent=1, sort_keys=True) + "\n")
        print(f"wrote {table.TABLE_PATH.relative_to(REPO)} ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
