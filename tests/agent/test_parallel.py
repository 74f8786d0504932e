"""Trials at once without Ray (agent/parallel.py with the in-process executor): batches, the next
phase running ahead on a provisional incumbent (agent/speculate.py), verdicts in proposal order
whatever order results arrive in, the ground clock of N nodes; and the one-node loop never loading
Ray. The Ray side is tests/agent/test_parallel_ray.py."""
from __future__ import annotations

import subprocess
import sys

from agent import cluster, fanout, speculate
from agent import run as runlib
from agent.config import Budget, Measure
from agent.decide import objective_value
from agent.parallel import Driver, Open
from agent.planners.base import PHASES, Proposal
from agent.planners.builtin import BuiltinPlanner
from agent.records import Result
from tools.candidate import Candidate, Parallel
from agent.worker import InlineExecutor, run as run_task
from tests.agent.conftest import small_config


def drive(tmp_path, workers: int, trials: int = 12, name: str = "run", planner=None, executor=None, **kw):
    rd = tmp_path / name
    rd.mkdir()
    rt = runlib.open_runtime(rd, small_config(budget=Budget(trials=trials), workers=workers, **kw))
    if planner is not None:
        rt.planner = planner
    runlib.record_start(rt)
    out = cluster.drive(rt, executor=executor or InlineExecutor())
    return rt, out


def test_batches_run_at_most_one_phase_ahead_and_verdicts_come_in_proposal_order(tmp_path):
    rt, out = drive(tmp_path, 4)
    led = rt.ledger
    trials = led.trials()
    assert out["status"] == "done" and len(trials) == 12
    # Decided strictly in proposal order. A launch that failed is finished when its result comes
    # (its verdict owes nothing to the incumbent, and the planner may answer it at once), so the
    # order is that of the keep/revert verdicts.
    ended = [t["ended"] for t in trials if t["verdict"] != "failed"]
    assert ended == sorted(ended)
    for a in trials:
        for b in trials:
            if b["id"] > a["id"] and b["created"] < a["ended"]:  # b was proposed while a was open
                assert PHASES.index(b["phase"]) - PHASES.index(a["phase"]) <= speculate.AHEAD, (a["id"], b["id"])
                assert "patch" not in (a["kind"], b["kind"]), (a["id"], b["id"])  # a patch runs alone
    side_by_side = [(a["id"], b["id"]) for a in trials for b in trials
                    if b["id"] > a["id"] and b["created"] < a["ended"]]
    assert side_by_side  # ... and several ran at once
    curve = led.meta("curve")
    assert len(curve) == 12 and [t for t, _ in curve] == sorted(t for t, _ in curve)


def test_the_next_phase_starts_before_the_last_trial_of_this_one_is_decided(tmp_path):
    # A run goes ahead only at a quiet point (every open trial's first measurement back, follow-ups
    # out): on the shipped fit this small run reaches one with 3 nodes in 16 trials; the scripted
    # test below shows the mechanism on fixed numbers.
    rt, _ = drive(tmp_path, 3, trials=16)
    trials = rt.ledger.trials()
    ahead = [(a["id"], b["id"]) for a in trials for b in trials if b["id"] > a["id"]
             and PHASES.index(b["phase"]) > PHASES.index(a["phase"]) and b["started"] < a["ended"]]
    assert ahead, [(t["id"], t["phase"]) for t in trials]


def _m(knee: float, right: int = 15) -> dict:
    return {"knee_tok_s": knee, "knee_rps": 1.0, "single_stream_tok_s": 50.0, "gpus": 8,
            "usd_per_gpu_h": 2.0, "tdp_w": 700.0, "evals": {"gsm8k": [1] * right + [0] * (20 - right)}}


class Script:
    """Proposals by count: the baseline; two flag settings a and b; then one candidate of the next
    phase (a layout) on whatever incumbent it is asked with (ctx.incumbent_candidate). The phases
    are named by PHASES: before the flags phase, the next phase runs only ahead on a provisional
    incumbent; from it on, also beside it on the incumbent (Driver._beside)."""
    name = "script"
    PHASES = ("precision", "speculative")

    def propose(self, ctx):
        n = len(ctx.trials)
        if n == 0:
            return BuiltinPlanner().propose(ctx)
        base = Candidate.model_validate(ctx.trials[0]["candidate"])
        if n in (1, 2):
            c = base.model_copy(update={"flags": {**base.flags, "--max-num-seqs": 64 * n}})
            return Proposal(kind="config", phase=self.PHASES[0], description="ab"[n - 1], candidate=c)
        if n == 3:
            c = ctx.incumbent_candidate().model_copy(update={"parallel": Parallel(tp=4, dp=2)})
            return Proposal(kind="config", phase=self.PHASES[1], description="c", candidate=c)
        return Proposal(kind="stop", phase=ctx.phase, description="script done")


class Scripted(InlineExecutor):
    """Each task's measurements from a table (trial, role) -> the values that role measures in
    turn, no sandbox: the keep/revert rule runs on numbers chosen so that b's first measurement
    beats the baseline clearly (b is the provisional incumbent; a's is within noise), a is then kept
    after two repeats (run side by side on the free nodes, agent/fanout.py), and b, no worse than
    the baseline on its evals, regresses against a's. Each measurement takes 100 ground seconds,
    b's first 150: a's first repeat goes out while b's node is still busy; c's first 500: back
    after a is decided (were it back before, c would supersede a, agent/parallel.py). The fifth
    trial, c rebuilt on a (agent/speculate.py rebase), clearly above c."""
    VALUES = {(1, "candidate"): [(1000, 15)],
              (2, "candidate"): [(1030, 20), (1010, 20), (1031, 20)], (2, "incumbent"): [(1000, 15)] * 2,
              (3, "candidate"): [(1200, 15)],
              (4, "candidate"): [(1300, 20)], (5, "candidate"): [(1500, 20)]}
    SLOW = {(3, "first"): 150.0, (4, "first"): 500.0}  # (trial, need) -> ground seconds of each of its measurements

    def wait(self, handles):
        h = min(handles)
        t = self._tasks.pop(h)
        self.seen = [*getattr(self, "seen", []), (t.trial_id, t.need, t.side, t.nth, len(handles))]
        self.dirs = {*getattr(self, "dirs", set()), t.work_dir}
        here = sum(1 for r in t.rows if r[0] == "incumbent")
        if t.need == "first":
            want = [("candidate", 0)]
        elif t.side:  # one side of a repeat: its nth measurement of that role
            want = [(t.side, t.nth)]
        else:  # both sides in turn on one node
            want = [("incumbent", here), ("candidate", here + 1)]
        g = self.SLOW.get((t.trial_id, t.need), 100.0)
        rows = [(role, _m(*self.VALUES[(t.trial_id, role)][i]), 1.0, g) for role, i in want]
        return h, {"rows": rows, "outcome": "launched", "diagnoses": [], "log_excerpt": "", "events": [],
                   "result": None, "ground_s": g * len(rows)}


def test_a_trial_built_on_a_candidate_that_loses_is_decided_against_the_real_incumbent(tmp_path):
    ex = Scripted()
    rt, _ = drive(tmp_path, 4, trials=10, planner=Script(), executor=ex)
    led = rt.ledger
    # a's repeats went out a side per node, each side's measurement numbered as one node would
    assert [(side, nth) for tid, need, side, nth, _ in ex.seen if tid == 2 and need == "repeat"] == \
        [("incumbent", 0), ("candidate", 1), ("incumbent", 1), ("candidate", 2)]
    assert sum(d.rsplit("/", 1)[1].startswith("trial-0002") for d in ex.dirs) == 5  # its first + 4 sides, each its own
    t = {x["id"]: x for x in led.trials()}
    assert [t[i]["verdict"] for i in (1, 2, 3)] == ["kept", "kept", "reverted"], [x["reason"] for x in t.values()]
    c = t[4]
    assert c["phase"] == "speculative" and c["incumbent_id"] == 3  # built on b while a and b were open
    assert c["started"] < t[2]["ended"]  # ... before the flags phase was decided
    assert t[3]["reason_code"] == "eval_regression"
    assert c["verdict"] == "kept" and c["numbers"]["incumbent"] == [1030.0, 1010.0, 1031.0]  # a's, not b's
    # c, kept, carries b's flag: c's layout on a's flags is what one trial at a time would have tried
    assert t[5]["incumbent_id"] == 4 and t[5]["candidate"] == {**c["candidate"], "flags": t[2]["candidate"]["flags"]}


class FlagsScript(Script):
    PHASES = ("flags", "parallel")


def test_from_the_flags_phase_on_the_next_phase_runs_beside_it_on_the_incumbent(tmp_path):
    """The same script with a and b in the flags phase: the layout c takes the node they leave idle
    at once, built on the incumbent (the baseline), not on a provisional one once their first
    measurements are back; it is decided in its turn, and a's flag is carried onto it."""
    rt, _ = drive(tmp_path, 4, trials=10, planner=FlagsScript(), executor=Scripted())
    t = {x["id"]: x for x in rt.ledger.trials()}
    assert [t[i]["verdict"] for i in (1, 2, 3, 4)] == ["kept", "kept", "reverted", "kept"], [x["reason"] for x in t.values()]
    c = t[4]
    assert c["phase"] == "parallel" and c["incumbent_id"] == 1 and c["started"] < t[3]["started"] + 1
    assert c["numbers"]["incumbent"] == [1030.0, 1010.0, 1031.0]  # decided against a, kept before it
    assert rt.ledger.meta("parallel")["beside"] == [4]  # a resumed run knows it too
    assert t[5]["incumbent_id"] == 4 and t[5]["candidate"] == {**c["candidate"], "flags": t[2]["candidate"]["flags"]}
