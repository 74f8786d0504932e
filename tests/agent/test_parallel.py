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
    incumbent; from it on, also beside it on the incumbent (Driver._beside). a and b are two phases
    past the baseline's, so they wait for its verdict (speculate.starting)."""
    name = "script"
    PHASES = ("speculative", "flags")

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
    assert c["phase"] == "flags" and c["incumbent_id"] == 3  # built on b while a and b were open
    assert c["started"] < t[2]["ended"]  # ... before a was decided
    assert t[3]["reason_code"] == "eval_regression"
    assert c["verdict"] == "kept" and c["numbers"]["incumbent"] == [1030.0, 1010.0, 1031.0]  # a's, not b's
    # c, kept, carries b's flag: c's layout on a's flags is what one trial at a time would have tried
    assert t[5]["incumbent_id"] == 4 and t[5]["candidate"] == {**c["candidate"], "flags": t[2]["candidate"]["flags"]}
    assert led.incumbent() == 5


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
    assert c["phase"] == "parallel" and c["incumbent_id"] == 1 and c["started"] < t[2]["ended"]  # before a was decided
    assert c["numbers"]["incumbent"] == [1030.0, 1010.0, 1031.0]  # decided against a, kept before it
    assert rt.ledger.meta("parallel")["beside"] == [4]  # a resumed run knows it too
    assert t[5]["incumbent_id"] == 4 and t[5]["candidate"] == {**c["candidate"], "flags": t[2]["candidate"]["flags"]}


def test_a_repeat_with_one_node_free_waits_for_a_second_rather_than_run_its_sides_in_turn(tmp_path):
    # two nodes: a's first ends at 200 while b's runs until 250. Both sides of a repeat in turn on
    # the free node would end at 400; waiting for b's node, side by side, they end at 350
    ex = Scripted()
    rt, _ = drive(tmp_path, 2, trials=10, planner=Script(), executor=ex)
    a = [(side, nth) for tid, need, side, nth, _ in ex.seen if tid == 2 and need == "repeat"]
    assert a == [("incumbent", 0), ("candidate", 1), ("incumbent", 1), ("candidate", 2)], ex.seen
    assert [t["verdict"] for t in rt.ledger.trials()][:3] == ["kept", "kept", "reverted"]


def test_the_provisional_incumbent_is_what_deciding_the_open_trials_on_their_first_measurements_leaves():
    class Led:  # the incumbent's measurements, as the ledger gives them
        def measurements(self, tid, role=None):
            return [{"data": _m(1000.0)}] if tid == 1 else []
    gate = small_config().gate
    q = [Open(2, "flags", "config", first_data=_m(1400.0)),  # clearly beats 1000 -> taken as kept
         Open(3, "flags", "config", first_data=_m(1300.0)),  # worse than trial 2's 1400 -> not
         Open(4, "flags", "config", first_data=None),  # failed: nothing to build on
         Open(5, "flags", "patch", first_data=_m(9000.0))]  # a patch is never built on ahead of its review
    assert speculate.provisional(Led(), q, 1, "knee", gate) == 2
    q[1].first_data = _m(2000.0)  # now trial 3 beats trial 2 in its turn
    assert speculate.provisional(Led(), q, 1, "knee", gate) == 3
    assert speculate.provisional(Led(), q[2:], 1, "knee", gate) == 1  # nothing beats it: the incumbent
    q[0].first_data = _m(1010.0)  # within noise: the rule would repeat it, not keep it
    q[1].first_data = None
    assert speculate.provisional(Led(), q, 1, "knee", gate) == 1


def test_verdicts_do_not_depend_on_which_worker_finishes_first(tmp_path):
    class NewestFirst(InlineExecutor):  # results come back in the opposite order
        def wait(self, handles):
            h = max(handles)
            return h, run_task(self._tasks.pop(h))
    runs = []
    for name, ex in (("oldest", InlineExecutor()), ("newest", NewestFirst())):
        rd = tmp_path / name
        rd.mkdir()
        rt = runlib.open_runtime(rd, small_config(budget=Budget(trials=10), workers=4))
        runlib.record_start(rt)
        cluster.drive(rt, executor=ex)
        runs.append([(t["id"], t["phase"], t["incumbent_id"], t["verdict"], t["reason"]) for t in rt.ledger.trials()])
        runs[-1].append(rt.ledger.meta("curve"))
    assert runs[0] == runs[1]


def test_n_nodes_take_less_ground_time_than_one_for_the_same_trials(tmp_path):
    one, _ = drive(tmp_path, 1, trials=6, name="one")
    four, _ = drive(tmp_path, 4, trials=6, name="four")
    g1, g4 = one.ledger.meta("parallel")["now"], four.ledger.meta("parallel")["now"]
    ground = sum(m["ground_s"] for t in four.ledger.trials() for m in four.ledger.measurements(t["id"]))
    assert g4 < g1 and g4 < ground  # overlapping trials: the clock is less than the work's sum
    work1 = sum(m["ground_s"] for t in one.ledger.trials() for m in one.ledger.measurements(t["id"]))
    assert g1 >= work1  # one node: the clock covers every measurement, one after another


def test_the_one_node_loop_never_imports_ray(tmp_path):
    code = ("import sys; from agent.run import start; from tests.agent.conftest import small_config;"
            "from agent.config import Budget;"
            f"start(small_config(budget=Budget(trials=2)), {str(tmp_path / 'run')!r});"
            "print('ray' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "False"


def test_workers_out_of_range_exit_2_naming_the_value(agent):
    r = agent("optimize", "--model", "glm-5.2", "--hw", "mi355x", "--workers", "0")
    assert r.returncode == 2 and "--workers 0: allowed: 1 to 1024" in (r.stdout + r.stderr)


def test_a_repeat_takes_as_many_nodes_as_its_sides_and_the_rule_allow():
    # baseline measured once, the candidate once, 3 measurements per side allowed: two more repeats
    # need two incumbent and two candidate measurements, four nodes
    assert fanout.sides(1, 0, 1, 3, 4) == [("incumbent", 0), ("incumbent", 1), ("candidate", 1), ("candidate", 2)]
    assert fanout.sides(1, 0, 1, 3, 3) == [("incumbent", 0), ("candidate", 1)]  # one repeat fits
    assert fanout.sides(3, 0, 1, 3, 8) == [("candidate", 1), ("candidate", 2)]  # the incumbent has its three
    assert fanout.sides(1, 0, 1, 3, 1) == []  # one node: both sides in turn there
    assert fanout.sides(3, 0, 2, 3, 8) == []  # one measurement left to take: nothing to spread
    assert fanout.sides(2, 1, 2, 3, 2) == [("incumbent", 1), ("candidate", 2)]  # resumed after one repeat


class ThreeFlags:
    """The baseline, then three flag settings a, b, c on it; then nothing more."""
    name = "three-flags"

    def propose(self, ctx):
        n = len(ctx.trials)
        if n == 0:
            return BuiltinPlanner().propose(ctx)
        if n > 3:
            return Proposal(kind="stop", phase=ctx.phase, description="script done")
        base = Candidate.model_validate(ctx.trials[0]["candidate"])
        c = base.model_copy(update={"flags": {**base.flags, "--max-num-seqs": 64 * n}})
        return Proposal(kind="config", phase="flags", description="abc"[n - 1], candidate=c)


class ThreeWithinNoise(Scripted):
    """a, b and c all measure within noise of the baseline at first. a stays within it (reverted
    after its repeats); b's repeats make it a clear win (kept); c would have needed repeats against
    the baseline, but loses to b."""
    VALUES = {(1, "candidate"): [(1000, 15)],
              (2, "candidate"): [(1010, 20), (1000, 20), (1005, 20)], (2, "incumbent"): [(1000, 15)] * 2,
              (3, "candidate"): [(1030, 20), (1040, 20), (1035, 20)], (3, "incumbent"): [(1000, 15)] * 2,
              (4, "candidate"): [(1025, 20), (1020, 20), (1022, 20)], (4, "incumbent"): [(1001, 15)] * 2}
    SLOW = {}

    def submit(self, task):
        h = super().submit(task)
        self.sent = [*getattr(self, "sent", []), (task.trial_id, task.need, task.side, task.incumbent_id)]
        return h


def test_repeats_of_trials_behind_the_head_run_with_its_own_and_a_kept_head_voids_their_incumbent_side(tmp_path):
    ex = ThreeWithinNoise()
    rt, _ = drive(tmp_path, 12, trials=10, planner=ThreeFlags(), executor=ex)  # room for all three trials' repeats
    led = rt.ledger
    t = {x["id"]: x for x in led.trials()}
    assert [t[i]["verdict"] for i in (1, 2, 3, 4)] == ["kept", "reverted", "kept", "reverted"], [x["reason"] for x in t.values()]
    # c's repeats went out right after b's, against the baseline, before b was decided
    repeats = [(tid, side, inc) for tid, need, side, inc in ex.sent if need == "repeat"]
    b_last = max(i for i, r in enumerate(repeats) if r[0] == 3)
    c_first = min(i for i, r in enumerate(repeats) if r[0] == 4)
    assert c_first == b_last + 1 and all(inc == 1 for tid, _, inc in repeats if tid == 4), repeats
    assert all(m["data"]["vs"] == 1 for m in led.measurements(4, "incumbent"))  # tagged with what they measured
    # b was kept: c is decided against b's measurements, the baseline rows it took count for nothing
    assert t[4]["incumbent_id"] == 1 and t[4]["numbers"]["incumbent"] == [1030.0, 1040.0, 1035.0], t[4]["numbers"]
    assert t[4]["numbers"]["candidate"] == [1025.0, 1020.0, 1022.0] and t[4]["reason_code"] == "no_gain", t[4]["reason"]


class Clocked(Driver):
    """The driver, noting each task's ground start as it sends it."""
    def _send(self, o, task):
        super()._send(o, task)
        self.starts = [*getattr(self, "starts", []), (task, self.now)]


class Timing(InlineExecutor):
    """Runs tasks as InlineExecutor does, noting each one's ground seconds."""
    def wait(self, handles):
        task = self._tasks[min(handles)]  # the one InlineExecutor runs
        h, res = super().wait(handles)
        self.ground = {**getattr(self, "ground", {}), id(task): float(res.get("ground_s") or 0.0)}
        return h, res


def test_no_node_runs_two_tasks_at_once_and_none_starts_before_what_it_follows(tmp_path):
    # A node is busy until its task's ground end, whenever its result came back: a task sent on a
    # result that is back must not start before that result's end, nor on a node still busy then.
    # (The driver that handled results as they came sent a third task onto these two nodes at
    # ground 3225 s: a repeat's side had come back, though it ran on until 3439 s.)
    workers = 2
    rd = tmp_path / "run"
    rd.mkdir()
    rt = runlib.open_runtime(rd, small_config(budget=Budget(trials=30), workers=workers))
    runlib.record_start(rt)
    ex = Timing()
    d = Clocked(rt, ex, workers)
    d.run()
    spans = [(start, start + ex.ground[id(t)], t) for t, start in d.starts if id(t) in ex.ground]
    assert len(spans) > 16  # repeats and evals too
    for s, e, t in spans:
        busy = [x for x in spans if x[0] <= s < x[1]]
        assert len(busy) <= workers, [(round(a), round(b), x.trial_id, x.need) for a, b, x in busy]
        if t.need != "first":  # a follow-up starts after the trial's first measurement ended
            first = next(x for x in spans if x[2].trial_id == t.trial_id and x[2].need == "first")
            assert s >= first[1], (t.trial_id, t.need, s, first[1])


def test_an_incumbent_side_row_counts_only_for_the_incumbent_it_measured(tmp_path):
    from agent.ledger import Ledger
    from agent.trial import LedgerRecorder
    (tmp_path / "l").mkdir()
    led = Ledger(tmp_path / "l", create=True)
    base = Candidate(framework="vllm")
    ids = [led.add_trial(phase="flags", kind="config", description=d, candidate=base.model_dump(mode="json"),
                         incumbent_id=None) for d in "xyz"]
    for tid in ids[:2]:
        led.add_measurement(tid, "candidate", _m(1000.0 + tid), wall_s=1.0, ground_s=1.0)
    z = ids[2]
    led.add_measurement(z, "candidate", _m(1100.0), wall_s=1.0, ground_s=1.0)
    led.add_measurement(z, "incumbent", {**_m(990.0), "vs": ids[0]}, wall_s=1.0, ground_s=1.0)
    led.add_measurement(z, "incumbent", _m(995.0), wall_s=1.0, ground_s=1.0)  # untagged: a one-node run's
    on_x, on_y = LedgerRecorder(led, z, ids[0]), LedgerRecorder(led, z, ids[1])
    assert [m["knee_tok_s"] for m in on_x.series()[0]] == [1000.0 + ids[0], 990.0, 995.0] and on_x.count("incumbent") == 2
    assert [m["knee_tok_s"] for m in on_y.series()[0]] == [1000.0 + ids[1], 995.0] and on_y.count("incumbent") == 1


class OneClearlyAbove(ThreeWithinNoise):
    """a measures within noise of the baseline; b, measured beside it, clearly above both, its
    evals run in the same session and pass; c below the baseline."""
    VALUES = {(1, "candidate"): [(1000, 15)],
              (2, "candidate"): [(1010, 20)] * 3, (2, "incumbent"): [(1000, 15)] * 2,
              (3, "candidate"): [(1300, 20)],
              (4, "candidate"): [(990, 15)]}


def test_a_head_within_noise_is_not_repeated_once_a_trial_behind_it_is_kept_clearly_above_both(tmp_path):
    # Kept or not, a can no longer end the run's incumbent: b is kept against the baseline and,
    # were a kept, against a. Its repeats would only hold b's verdict back.
    ex = OneClearlyAbove()
    rt, _ = drive(tmp_path, 4, trials=10, planner=ThreeFlags(), executor=ex)
    t = {x["id"]: x for x in rt.ledger.trials()}
    assert [t[i]["verdict"] for i in (1, 2, 3, 4)] == ["kept", "reverted", "kept", "reverted"], [x["reason"] for x in t.values()]
    assert t[2]["reason_code"] == "superseded" and "trial 3" in t[2]["reason"], t[2]["reason"]
    assert not [s for s in ex.sent if s[0] == 2 and s[1] != "first"], ex.sent  # neither repeated nor evaluated
    assert rt.ledger.incumbent() == 3 and t[4]["numbers"]["incumbent"] == [1300.0]


class ClearlyAboveButLater(OneClearlyAbove):
    """The same, b's first measurement taking 150 ground seconds: a's repeat is out when it comes."""
    SLOW = {(3, "first"): 150.0}


def test_a_head_s_repeat_is_stopped_once_a_trial_behind_it_comes_back_clearly_above_both(tmp_path):
    ex = ClearlyAboveButLater()
    rt, _ = drive(tmp_path, 4, trials=10, planner=ThreeFlags(), executor=ex)
    led = rt.ledger
    t = {x["id"]: x for x in led.trials()}
    # the baseline is decided at 100 s, a's first ends at 200 (its repeat goes out), b's at 250
    assert [s for s in ex.sent if s[0] == 2 and s[1] == "repeat"]
    assert t[2]["reason_code"] == "superseded" and t[3]["verdict"] == "kept", [x["reason"] for x in t.values()]
    assert len(led.measurements(2)) == 1  # its repeat, ending at 300 s, was stopped: nothing of it recorded
    assert [now for now, best in led.meta("curve") if best == 1300.0][0] == 250.0  # b kept when it came back


class AboveTheBaselineOnly(OneClearlyAbove):
    """b is kept against the baseline (+8%) but within noise of a (+4%): a's repeats still decide."""
    VALUES = {**OneClearlyAbove.VALUES, (2, "candidate"): [(1040, 20), (1045, 20), (1042, 20)],
              (3, "candidate"): [(1080, 20)] * 3, (3, "incumbent"): [(1042, 20)] * 2}


def test_a_head_is_repeated_when_no_trial_behind_it_is_clearly_above_it(tmp_path):
    ex = AboveTheBaselineOnly()
    rt, _ = drive(tmp_path, 4, trials=10, planner=ThreeFlags(), executor=ex)
    t = {x["id"]: x for x in rt.ledger.trials()}
    assert t[2]["reason_code"] != "superseded" and [s for s in ex.sent if s[0] == 2 and s[1] == "repeat"]


class FlagThenLayout:
    """The baseline; flag a; once a is kept, flag b on it; then a layout c on the incumbent it is
    asked with. Notes the phase each ask is made at."""
    name = "flag-then-layout"

    def propose(self, ctx):
        self.asked = [*getattr(self, "asked", []), (len(ctx.trials), ctx.phase)]
        n = len(ctx.trials)
        if n == 0:
            return BuiltinPlanner().propose(ctx)
        inc = ctx.incumbent_candidate() or Candidate.model_validate(ctx.trials[0]["candidate"])
        if n == 1:
            return Proposal(kind="config", phase="flags", description="a",
                            candidate=inc.model_copy(update={"flags": {**inc.flags, "--max-num-seqs": 64}}))
        if n == 2 and ctx.trials[1]["verdict"] != "kept":
            return Proposal(kind="stop", phase="flags", description="waiting for a")  # asked again once a is decided
        if n == 2:
            return Proposal(kind="config", phase="flags", description="b",
                            candidate=inc.model_copy(update={"flags": {**inc.flags, "--max-num-batched-tokens": 4096}}))
        if n == 3:
            return Proposal(kind="config", phase="parallel", description="c",
                            candidate=inc.model_copy(update={"parallel": Parallel(tp=4, dp=2)}))
        return Proposal(kind="stop", phase=ctx.phase, description="script done")


class SlowSecondFlag(Scripted):
    """a is a clear win; b, on a, measures below a and takes 300 ground seconds to; c, on a, clearly
    above a."""
    VALUES = {(1, "candidate"): [(1000, 15)], (2, "candidate"): [(1200, 15)],
              (3, "candidate"): [(1190, 15)], (4, "candidate"): [(1500, 15)]}
    SLOW = {(3, "first"): 300.0}


def test_once_a_phase_has_kept_a_trial_the_next_runs_ahead_on_it_without_waiting_for_the_rest(tmp_path):
    # a is kept and b, an alternative on a, is still measuring: c builds on a at once (b replaces a
    # only if it beats it), not once b's first measurement is back; and once c is kept, the planner
    # is asked at c's phase.
    planner = FlagThenLayout()
    rt, _ = drive(tmp_path, 4, trials=10, planner=planner, executor=SlowSecondFlag())
    t = {x["id"]: x for x in rt.ledger.trials()}
    assert [t[i]["verdict"] for i in (1, 2, 3, 4)] == ["kept", "kept", "reverted", "kept"], [x["reason"] for x in t.values()]
    assert t[4]["incumbent_id"] == 2 and t[4]["started"] < t[3]["ended"]
    assert (4, "parallel") in planner.asked, planner.asked


class KeptThenThreeAhead(FlagThenLayout):
    """FlagThenLayout a phase earlier (before the flags phase nothing runs beside it): a and b are
    speculative-phase trials, and three flag settings c, d, e of the flags phase follow on the
    incumbent."""
    def propose(self, ctx):
        n = len(ctx.trials)
        if n < 3:
            p = super().propose(ctx)
            return p.model_copy(update={"phase": "speculative"}) if n else p
        if n < 6:
            inc = ctx.incumbent_candidate()
            c = inc.model_copy(update={"flags": {**inc.flags, "--max-num-batched-tokens": 1024 * n}})
            return Proposal(kind="config", phase="flags", description="cde"[n - 3], candidate=c)
        return Proposal(kind="stop", phase=ctx.phase, description="script done")


def test_once_a_phase_has_kept_a_trial_every_idle_node_takes_the_next_phase_on_it(tmp_path):
    # a is kept and b is still measuring: c, d and e all build on a at once, as one trial at a time
    # would propose them on a (one trial ahead used to hold the rest until b's first measurement)
    ex = SlowSecondFlag()
    ex.VALUES = {**ex.VALUES, (5, "candidate"): [(1450, 15)], (6, "candidate"): [(1400, 15)]}
    rt, _ = drive(tmp_path, 5, trials=10, planner=KeptThenThreeAhead(), executor=ex)
    t = {x["id"]: x for x in rt.ledger.trials()}
    assert [t[i]["description"] for i in (4, 5, 6)] == ["c", "d", "e"]
    assert all(t[i]["incumbent_id"] == 2 and t[i]["started"] < t[3]["ended"] for i in (4, 5, 6)), t
    assert [t[i]["verdict"] for i in range(1, 7)] == ["kept", "kept", "reverted", "kept", "reverted", "reverted"]


class AheadFails:
    """The baseline; a flag setting a; a layout that runs ahead of a's verdict; then an answer to
    each failed trial of the phase it is asked in (what the built-in planner does first), noting
    the phase it was asked in."""
    name = "ahead-fails"

    def __init__(self):
        self.asked = []

    def propose(self, ctx):
        n = len(ctx.trials)
        if n == 0:
            return BuiltinPlanner().propose(ctx)
        base = Candidate.model_validate(ctx.trials[0]["candidate"])
        if n == 1:
            c = base.model_copy(update={"flags": {**base.flags, "--max-num-seqs": 64}})
            return Proposal(kind="config", phase="flags", description="a", candidate=c)
        if n == 2:
            c = ctx.incumbent_candidate().model_copy(update={"parallel": Parallel(tp=4, dp=2)})
            return Proposal(kind="config", phase="parallel", description="layout", candidate=c)
        self.asked.append(ctx.phase)
        for t in ctx.unanswered_failures():
            c = Candidate.model_validate(t["candidate"]).model_copy(update={"parallel": Parallel(tp=8)})
            return Proposal(kind="config", phase=ctx.phase, description="answer", fixes_trial=t["id"], candidate=c)
        return Proposal(kind="stop", phase=ctx.phase, description="script done")


class LayoutFailsFast(Scripted):
    """a measures within noise of the baseline (its repeats take 100 s a side); the layout, sent
    ahead once a's first measurement is back, fails to launch 10 s in."""
    VALUES = {(1, "candidate"): [(1000, 15)],
              (2, "candidate"): [(1010, 20), (1000, 20), (1005, 20)], (2, "incumbent"): [(1000, 15)] * 2,
              (4, "candidate"): [(1100, 20)]}
    SLOW = {}

    def wait(self, handles):
        h = min(handles)
        if self._tasks[h].trial_id != 3:
            return super().wait(handles)
        self._tasks.pop(h)
        fail = Result(verdict="failed", code="launch_failed", reason="launch failed: oom")
        return h, {"rows": [], "outcome": "launch_failed", "diagnoses": [], "log_excerpt": "out of memory",
                   "events": [], "result": fail.model_dump(), "ground_s": 10.0}


def test_a_trial_that_ran_ahead_and_failed_is_answered_in_its_own_phase(tmp_path):
    # the layout fails while a repeats; a is then decided and nothing is open: the run is in the
    # layout's phase, as one trial at a time would be, and its failure is answered there (asked
    # in a's phase, the planner would see no failure of its own and move past it)
    planner = AheadFails()
    rt, _ = drive(tmp_path, 6, trials=10, planner=planner, executor=LayoutFailsFast())
    t = {x["id"]: x for x in rt.ledger.trials()}
    assert t[3]["phase"] == "parallel" and t[3]["verdict"] == "failed"
    assert t[3]["started"] < t[2]["ended"]  # it ran ahead of a's verdict
    assert len(t) == 4 and t[4]["proposal"]["fixes_trial"] == 3 and t[4]["phase"] == "parallel", planner.asked
    assert t[4]["verdict"] == "kept"


class FlagsLeft(AheadFails):
    """AheadFails with one more flag setting b, which the flags phase has to propose once a is decided."""
    def propose(self, ctx):
        a_done = any(t["description"] == "a" and t["status"] == "done" for t in ctx.trials)
        if a_done and ctx.phase == "flags" and not any(t["description"] == "b" for t in ctx.trials):
            c = ctx.incumbent_candidate()
            c = c.model_copy(update={"flags": {**c.flags, "--max-num-batched-tokens": 4096}})
            return Proposal(kind="config", phase="flags", description="b", candidate=c)
        return super().propose(ctx)


class BFine(LayoutFailsFast):
    VALUES = {**LayoutFailsFast.VALUES, (4, "candidate"): [(900, 20)], (5, "candidate"): [(1100, 20)]}


def test_a_failed_trial_sent_beside_a_phase_is_answered_once_that_phase_has_nothing_more(tmp_path):
    # the layout, sent beside the flags phase, fails; the flags phase still has b to propose: b goes
    # first, on the flags phase's incumbent, and the layout's failure is answered in its own phase
    # after, as one trial at a time meets it (moving on at the failure would leave the flags unsearched)
    planner = FlagsLeft()
    rt, _ = drive(tmp_path, 6, trials=10, planner=planner, executor=BFine())
    t = {x["id"]: x for x in rt.ledger.trials()}
    assert t[3]["phase"] == "parallel" and t[3]["verdict"] == "failed" and rt.ledger.meta("parallel")["beside"] == [3]
    assert t[4]["description"] == "b" and t[4]["phase"] == "flags" and t[4]["started"] > t[2]["ended"]
    assert len(t) == 5 and t[5]["proposal"]["fixes_trial"] == 3 and t[5]["phase"] == "parallel", planner.asked


def test_before_anything_is_decided_idle_nodes_take_the_precision_phase_on_the_baseline(tmp_path):
    """The framework phase leaves nodes idle (three frameworks, six nodes): the precision phase goes
    out on the baseline before the frameworks are measured, each checkpoint on every framework still
    out, in the order one trial at a time would propose them, and is decided after them."""
    rt, _ = drive(tmp_path, 6, trials=8)
    trials = rt.ledger.trials()
    fw = [t for t in trials if t["phase"] == "framework"]
    early = [t for t in trials if t["phase"] == "precision" and t["started"] < min(f["ended"] for f in fw)]
    assert len(fw) == 3 and len(early) == 3, [(t["id"], t["phase"], t["description"]) for t in trials]
    assert [t["incumbent_id"] for t in early] == [1] * 3
    w = early[0]["candidate"]["weights"]
    assert [(t["candidate"]["weights"], t["candidate"]["framework"]) for t in early] == \
        [(w, f["candidate"]["framework"]) for f in fw]
    assert min(t["ended"] for t in early if t["verdict"] != "failed") > max(f["ended"] for f in fw)
