"""kill -9 the agent in the middle of a trial; `resume` finishes the run, loses no completed
trial, re-runs none, and leaves no server process behind."""
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import procs

REPO = Path(__file__).resolve().parents[2]


def _agent(what, run_dir, log):
    return subprocess.Popen([sys.executable, "-m", "tests.agent.run_agent", what, str(run_dir), str(log)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _trials(run_dir):
    db = sqlite3.connect(run_dir / "ledger.sqlite")
    try:
        return db.execute("SELECT id, status FROM trials ORDER BY id").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()


def _finished(run_dir):
    """Per done trial: when it ended and which measurement rows it has."""
    db = sqlite3.connect(run_dir / "ledger.sqlite")
    try:
        rows = db.execute("SELECT id, ended FROM trials WHERE status='done'").fetchall()
        return {i: (e, tuple(r[0] for r in db.execute(
            "SELECT id FROM measurements WHERE trial_id=? ORDER BY id", (i,)))) for i, e in rows}
    except sqlite3.OperationalError:
        return []
    finally:
        db.close()


def _alive(pgid):
    """A process of the group that is running (a zombie whose parent was killed counts as dead:
    it holds no resources and PID 1 in a container may never reap it)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


@pytest.mark.slow
def test_kill_mid_trial_then_resume(tmp_path):
    run_dir, log = tmp_path / "run", tmp_path / "launches.log"
    p = _agent("start", run_dir, log)
    deadline = time.time() + 120
    pgids = []
    while time.time() < deadline:  # wait until >= 3 trials are done and a server is up mid-trial
        rows = _trials(run_dir) if (run_dir / "ledger.sqlite").exists() else []
        done = [i for i, s in rows if s == "done"]
        running = [i for i, s in rows if s == "running"]
        pgids = procs.live_records(run_dir)
        if len(done) >= 3 and running and pgids:
            break
        assert p.poll() is None, p.communicate()
        time.sleep(0.02)
    else:
        pytest.fail("the agent never reached a trial in flight")
    p.send_signal(signal.SIGKILL)
    p.wait()
    done_before = {i for i, s in _trials(run_dir) if s == "done"}
    finished_before = _finished(run_dir)
    launches_before = len(log.read_text().split())
    orphans = [int(f.stem) for f in procs.live_records(run_dir)]
    assert orphans and all(_alive(g) for g in orphans)  # the killed agent left its server running

    r = _agent("resume", run_dir, log)
    out, err = r.communicate(timeout=300)
    assert r.returncode == 0, err[-3000:]
    assert out.strip().endswith("done")
    rows = _trials(run_dir)
    assert all(s == "done" for _, s in rows)
    assert done_before <= {i for i, _ in rows}  # nothing completed was lost
    finished_after = _finished(run_dir)
    for tid, row in finished_before.items():  # ... and nothing completed was run again
        assert finished_after[tid] == row, tid
    assert len(log.read_text().split()) > launches_before  # the resumed run did launch the rest
    assert not any(_alive(g) for g in orphans)  # the orphaned server was stopped
    assert not procs.live_records(run_dir)
