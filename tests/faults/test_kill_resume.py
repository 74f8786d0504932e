"""kill -9 at random points of sim runs, then `agent resume` (itself killed again in some cases):
the final ledger (every trial, verdict, reason, measurement, patch and the ground clock) is the
same as an uninterrupted run's. Kill points are drawn from a seeded RNG and spread over the run:
before the ledger exists, mid-trial, mid-patch (approve auto applies the MTP and ROCm fixes),
mid-MoE-tuning, while writing the report. With the time budget, a resume that reset the sim's
clock would run more trials than the uninterrupted run (issue 13 item 6)."""
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.run import start
from tests.faults.runner import config
from tests.faults.state import has_config, signature, trials_done

REPO = Path(__file__).resolve().parents[2]
CASES = int(os.environ.get("INFERLOOP_FAULT_CASES", "6"))  # per budget variant
BUDGET_TRIALS = {"trials": 8, "time": 15}


def _spawn(what, run_dir, variant):
    return subprocess.Popen([sys.executable, "-m", "tests.faults.runner", what, str(run_dir), variant], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _kill_at(p, run_dir, done_target: int, extra_s: float, timeout_s: float = 60) -> bool:
    """SIGKILL the runner once `done_target` trials are done (+ extra_s); False if it finished first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if p.poll() is not None:
            return False
        if trials_done(run_dir) >= done_target:
            time.sleep(extra_s)
            break
        time.sleep(0.01)
    if p.poll() is not None:
        return False
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    return True


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = {}
    for v in BUDGET_TRIALS:
        d = tmp_path_factory.mktemp(f"ref-{v}") / "run"
        start(config(v), d)
        out[v] = signature(d)
    return out


CASE_IDS = [(v, i) for v in BUDGET_TRIALS for i in range(CASES)]


@pytest.mark.parametrize("variant,case", CASE_IDS, ids=[f"{v}-{i}" for v, i in CASE_IDS])
def test_killed_and_resumed_run_equals_the_uninterrupted_one(reference, tmp_path, variant, case):
    rng = random.Random(f"{variant}-{case}")
    run_dir = tmp_path / "run"
    kills = 0
    what = "start"
    for attempt in range(2 if rng.random() < 0.5 else 1):  # a kill, and sometimes a kill of the resume too
        p = _spawn(what, run_dir, variant)
        target = rng.randrange(-1, BUDGET_TRIALS[variant])
        if _kill_at(p, run_dir, target, rng.uniform(0, 0.15)):
            kills += 1
        what = "resume" if has_config(run_dir) else "start"  # killed before the config was recorded: start again
    p = _spawn(what, run_dir, variant)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-3000:]
    assert out.strip().endswith("done"), (out, err[-2000:])
    got, want = signature(run_dir), reference[variant]
    assert [t["id"] for t in got["trials"]] == [t["id"] for t in want["trials"]], kills
    for a, b in zip(got["trials"], want["trials"]):
        assert a == b, (kills, a["id"])
    assert got["measurements"] == want["measurements"]
    assert got["patches"] == want["patches"] and got["meta"] == want["meta"]
    assert not list((run_dir / "src").rglob("inferloop-operation"))  # no patch left half-done
