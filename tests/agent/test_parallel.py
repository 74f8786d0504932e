"""Trials at once without Ray (agent/parallel.py with the in-process executor): batches of one
phase, verdicts in proposal order, the ground clock of N nodes; and the one-node loop never
loading Ray. The Ray side is tests/agent/test_parallel_ray.py."""
from __future__ import annotations

import subprocess
import sys

from agent import cluster
from agent import run as runlib
from agent.config import Budget
from agent.parallel import InlineExecutor
from tests.agent.conftest import small_config


def drive(tmp_path, workers: int, trials: int = 12, name: str = "run"):
    rd = tmp_path / name
    rd.mkdir()
    rt = runlib.open_runtime(rd, small_config(budget=Budget(trials=trials), workers=workers))
    runlib.record_start(rt)
    out = cluster.drive(rt, executor=InlineExecutor())
    return rt, out


def test_batches_hold_one_phase_and_verdicts_come_in_proposal_order(tmp_path):
    rt, out = drive(tmp_path, 4)
    led = rt.ledger
    trials = led.trials()
    assert out["status"] == "done" and len(trials) == 12
    ended = [t["ended"] for t in trials]
    assert ended == sorted(ended)  # decided strictly in proposal order
    for a in trials:  # a trial of a later phase is proposed only once every earlier one is decided
        for b in trials:
            if b["id"] > a["id"] and b["phase"] != a["phase"]:
                assert b["created"] >= a["ended"], (a["id"], b["id"])
    side_by_side = [(a["id"], b["id"]) for a in trials for b in trials
                    if b["id"] > a["id"] and b["created"] < a["ended"]]
    assert side_by_side  # ... and within a phase several ran at once
    curve = led.meta("curve")
    assert len(curve) == 12 and [t for t, _ in curve] == sorted(t for t, _ in curve)


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
