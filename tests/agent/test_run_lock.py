"""Issue 13 item 5: a second `agent resume` of a run that is being worked refuses, naming the
holder (pid, host, since); a lock whose holder died (kill -9) is taken over."""
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agent import run_lock
from agent.run import resume, start
from tests.agent.conftest import fake_factory, fake_suite, small_config

REPO = Path(__file__).resolve().parents[2]


def _holder(run_dir):
    """Another process that takes the run's lock and keeps it."""
    code = (f"import sys, time; sys.path.insert(0, {str(REPO)!r}); from agent import run_lock; "
            f"run_lock.acquire({str(run_dir)!r}); print('held', flush=True); time.sleep(120)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert p.stdout.readline().strip() == "held"
    return p


@pytest.fixture
def run(tmp_path):
    d = tmp_path / "run"
    start(small_config(budget={"trials": 2}), d, sandbox_factory=fake_factory(), suite_factory=fake_suite)
    return d


def test_second_resume_refuses_naming_the_holder(run, agent):
    p = _holder(run)
    try:
        with pytest.raises(run_lock.RunBusy) as e:
            resume(run, sandbox_factory=fake_factory(), suite_factory=fake_suite)
        msg = str(e.value)
        assert f"pid {p.pid}" in msg and socket.gethostname() in msg and "since 20" in msg
        r = agent("resume", str(run))
        assert r.returncode == 2 and f"pid {p.pid}" in r.stderr and "Traceback" not in r.stderr
        assert agent("runs", "--root", str(run.parent), "--json").stdout.count('"status": "done"') == 1
    finally:
        p.kill(), p.wait()


def test_a_dead_holder_is_taken_over(run):
    p = _holder(run)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    assert run_lock.holder(run) is None
    out = resume(run, sandbox_factory=fake_factory(), suite_factory=fake_suite)
    assert out["status"] == "done"
    assert run_lock.holder(run) is None  # given back when resume returned


def test_runs_says_interrupted_for_a_killed_run_and_running_while_held(run, agent):
    from agent.ledger import Ledger
    led = Ledger(run)
    led.set_meta("status", "running")  # what a kill -9 mid-run leaves
    led.close()
    assert '"status": "interrupted"' in agent("runs", "--root", str(run.parent), "--json").stdout
    p = _holder(run)
    try:
        assert '"status": "running"' in agent("runs", "--root", str(run.parent), "--json").stdout
    finally:
        p.kill(), p.wait()


def test_a_dead_holders_leftover_child_is_waited_for_not_named(tmp_path):
    """A child the killed agent was forking (before its exec) still has the lock file open for a
    moment; the dead pid in the file is not refused as if it were alive."""
    code = (f"import os, sys, time; sys.path.insert(0, {str(REPO)!r}); from agent import run_lock; "
            f"run_lock.acquire({str(tmp_path)!r}); pid = os.fork()\n"
            "if pid == 0:\n    time.sleep(1.0); os._exit(0)\n"
            "print('held', flush=True); time.sleep(120)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    p.kill(), p.wait()  # the agent dies; its forked child lives on for a second with the fd
    run_lock.acquire(tmp_path)  # waits for the child instead of naming the dead pid
    run_lock.release(tmp_path)
