"""Corrupted and missing state files, and concurrent resumes (issue 13 items 5, 10). The ledger
is the source of truth: with checkpoints deleted or garbage, resume rebuilds the run's position
from it and ends exactly like the uninterrupted run; a damaged ledger gives one clear line (exit
2) from every command, and one corrupt run does not break `agent runs` for the others."""
import os
import subprocess
import sys

import pytest

from agent.run import start
from tests.faults.runner import config
from tests.faults.state import first_difference, signature
from tests.faults.test_kill_resume import REPO, _kill_at, _spawn


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    d = tmp_path_factory.mktemp("ref") / "run"
    start(config("trials"), d)
    return signature(d)


def _killed_run(tmp_path, at: int = 3):
    run_dir = tmp_path / "run"
    assert _kill_at(_spawn("start", run_dir, "trials"), run_dir, at, 0.02)
    return run_dir


def _finish(run_dir):
    p = _spawn("resume", run_dir, "trials")
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0 and out.strip().endswith("done"), err[-3000:]


@pytest.mark.parametrize("damage,at,extra", [("deleted", 3, 0.02), ("garbage", 3, 0.0), ("truncated", 4, 0.05),
                                             ("deleted", 1, 0.0), ("deleted", 5, 0.01), ("garbage", 6, 0.03)])
def test_lost_or_damaged_checkpoints_are_rebuilt_from_the_ledger(reference, tmp_path, damage, at, extra):
    run_dir = tmp_path / "run"
    assert _kill_at(_spawn("start", run_dir, "trials"), run_dir, at, extra)
    ck = run_dir / "checkpoints.sqlite"
    for f in run_dir.glob("checkpoints.sqlite*"):
        f.unlink()
    if damage == "garbage":
        ck.write_bytes(os.urandom(4096))
    elif damage == "truncated":
        ck.write_bytes(b"SQLite format 3\x00" + b"\x00" * 50)
    _finish(run_dir)
    got = signature(run_dir)
    assert got == reference, first_difference(got, reference)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty-json"])
def test_a_damaged_ledger_is_one_clear_line_everywhere(tmp_path, agent, damage):
    good, bad = tmp_path / "runs" / "good", tmp_path / "runs" / "bad"
    for d in (good, bad):  # in processes of their own: no connection of this one keeps the file cached
        p = _spawn("start", d, "one")
        assert p.wait(timeout=120) == 0, p.stderr.read()
    led = bad / "ledger.sqlite"
    if damage != "empty-json":
        for f in bad.glob("ledger.sqlite-*"):  # the write-ahead log would let sqlite repair the file
            f.unlink()
    if damage == "truncated":
        led.write_bytes(led.read_bytes()[: len(led.read_bytes()) // 3])
    elif damage == "garbage":
        led.write_bytes(os.urandom(8192))
    else:
        import sqlite3
        db = sqlite3.connect(led)
        db.execute("UPDATE meta SET value='{not json' WHERE key='config'")
        db.commit(), db.close()
    cmds = [["resume", str(bad)], ["report", str(bad)], ["approvals", str(bad)], ["approve", str(bad), "p01"]]
    for cmd in cmds[:2] if damage == "empty-json" else cmds:  # approvals never read the damaged config row
        r = agent(*cmd)
        assert r.returncode == 2 and "Traceback" not in r.stderr, (cmd, r.stderr)
        assert "ledger" in r.stderr and "unreadable" in r.stderr, (cmd, r.stderr)
    r = agent("runs", "--root", str(tmp_path / "runs"), "--json")
    assert r.returncode == 0 and '"status": "done"' in r.stdout and "unreadable" in r.stdout


def test_concurrent_resumes_one_works_the_others_refuse(reference, tmp_path):
    run_dir = _killed_run(tmp_path, at=2)
    ps = [subprocess.Popen([sys.executable, "-m", "agent.cli", "resume", str(run_dir)], cwd=REPO, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]  # the real CLI
    results = [p.communicate(timeout=120) + (p.returncode,) for p in ps]
    codes = sorted(rc for _, _, rc in results)
    assert all(rc in (0, 2) for rc in codes) and 0 in codes, results
    for out, err, rc in results:
        assert "Traceback" not in err
        if rc == 2:
            assert "is being worked on by pid" in err and "since" in err
    got = signature(run_dir)  # no duplicate measurement, no changed verdict
    assert got == reference, first_difference(got, reference) + "".join(
        f"\n--- resume {i} (exit {rc}):\n{out[-2000:]}\n{err[-4000:]}" for i, (out, err, rc) in enumerate(results))


def test_a_start_killed_before_its_config_was_recorded(tmp_path, agent):
    from agent.ledger import Ledger
    Ledger(tmp_path / "r", create=True).close() if (tmp_path / "r").mkdir() is None else None
    r = agent("resume", str(tmp_path / "r"))
    assert r.returncode == 2 and "before its configuration was recorded" in r.stderr and "Traceback" not in r.stderr
    out = start(config("one"), tmp_path / "r")  # ... and the same directory can simply be started again
    assert out["status"] == "done"


KILL_AFTER_PATCH_ROW = """
import os, signal, sys
from pathlib import Path
from agent.ledger import Ledger
from agent.run import start
from tests.faults.runner import config
add_patch = Ledger.add_patch
def killed_after(self, **kw):
    out = add_patch(self, **kw)
    if kw.get("trial_id") is None:  # a proposed patch (review records name their trial)
        os.kill(os.getpid(), signal.SIGKILL)
    return out
Ledger.add_patch = killed_after
start(config("trials"), Path(sys.argv[1]))
"""


def test_a_kill_between_a_patch_and_its_trial_leaves_neither(reference, tmp_path):
    """kill -9 right after the first proposed patch's row was written, before its trial's: the
    resumed run numbers its patches as the uninterrupted one did (an orphan row made it p03 for p02)."""
    assert reference["patches"], "the uninterrupted run proposed no patch: this fault needs one (the sim's path moved)"
    run_dir = tmp_path / "run"
    p = subprocess.run([sys.executable, "-c", KILL_AFTER_PATCH_ROW, str(run_dir)], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == -9, p.stderr[-3000:]
    _finish(run_dir)
    got = signature(run_dir)
    assert got == reference, first_difference(got, reference)
