"""Trials at once without Ray (agent/parallel.py with the in-process executor): batches, the next
phase running ahead on a provisional incumbent (agent/speculate.py), verdicts in proposal order
whatever order results arrive in, the ground clock of N nodes; and the one-node loop never loading
Ray. The Ray side is tests/agent/test_parallel_ray.py."""
from __future__ import annotations

import subprocess
import sys

from agent import cluster, speculate
from agent import run as runlib
from agent.config import Budget, Measure
from agent.decide import objective_value
from agent.parallel import InlineExecutor
from agent.planners.base import PHASES
from agent.worker import run as run_task
from tests.agent.conftest import small_config


def drive(tmp_path, workers: int, trials: int = 12, name: str = "run", **kw):
    rd = tmp_path / name
    rd.mkdir()
    rt = runlib.open_runtime(rd, small_config(budget=Budget(trials=trials), workers=workers, **kw))
    runlib.record_start(rt)
    out = cluster.drive(rt, executor=InlineExecutor())
    return rt, out


def test_batches_run_at_most_one_phase_ahead_and_verdicts_come_in_proposal_order(tmp_path):
    rt, out = drive(tmp_path, 4)
    led = rt.ledger
    trials = led.trials()
    assert out["status"] == "done" and len(trials) == 12
    ended = [t["ended"] for t in trials]
    assert ended == sorted(ended)  # decided strictly in proposal order
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
    rt, _ = drive(tmp_path, 4)
    trials = rt.ledger.trials()
    ahead = [(a["id"], b["id"]) for a in trials for b in trials if b["id"] > a["id"]
             and PHASES.index(b["phase"]) > PHASES.index(a["phase"]) and b["started"] < a["ended"]]
    assert ahead, [(t["id"], t["phase"]) for t in trials]


def test_a_trial_built_on_a_candidate_that_loses_is_decided_against_the_real_incumbent(tmp_path):
    # glm-5.2/mi355x with the default workload: atom's first measurement beats the vLLM baseline by
    # far, so the precision phase runs ahead on it; atom then loses on its evals (the sim's
    # long-context drop)
    rt, _ = drive(tmp_path, 4, trials=6, measure=Measure())
    led = rt.ledger
    trials = {t["id"]: t for t in led.trials()}
    on_loser = [t for t in trials.values() if t["incumbent_id"] is not None
                and trials[t["incumbent_id"]]["verdict"] == "reverted" and t["verdict"] in ("kept", "reverted")]
    assert on_loser, [(t["id"], t["incumbent_id"], t["verdict"]) for t in trials.values()]
    for t in on_loser:
        real = max(i for i in trials if i < t["id"] and trials[i]["verdict"] == "kept")  # the incumbent then
        inc = [objective_value(m["data"], "knee") for m in led.measurements(real, "candidate")]
        assert t["numbers"]["incumbent"][:len(inc)] == inc, (t["id"], real)


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
