"""A launched server leaves the tool's own record (`<run_dir>/procs/<pgid>.json`) while it runs and
removes it on stop, so a run killed with -9 can be cleaned up by `agent resume`
(agent.nodes.reap_stale_servers) and a clean one leaves nothing behind. Resume kills only groups
those records name and that are provably the ones started (issue 13 item 2): a `*.pgid` file a
patch planted, or a record whose pid now belongs to another process, kills nothing."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

from agent.nodes import reap_stale_servers
from tools import procs
from tools.server import ProcessHandle


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_pgid_file_lives_as_long_as_the_group(tmp_path):
    h = ProcessHandle([sys.executable, "-c", "import time; time.sleep(60)"], log_path=tmp_path / "server-1.log")
    f = tmp_path / "procs" / f"{h.pgid}.json"
    rec = json.loads(f.read_text())
    assert rec["pgid"] == h.pgid and rec["start"] == procs.identity(h.pgid)["start"] and _alive(h.pgid)
    h.stop(grace_s=2)
    assert not f.exists() and not _alive(h.pgid)


def test_a_killed_agent_leaves_a_pgid_that_resume_reaps(tmp_path):
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from tools.server import ProcessHandle
        h = ProcessHandle([sys.executable, "-c", "import time; time.sleep(600)"],
                          log_path=Path({str(tmp_path)!r}) / "server-9.log")
        print(h.pgid, flush=True)
        time.sleep(600)
    """)
    agent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             start_new_session=True, cwd=os.getcwd())
    try:
        pgid = int(agent.stdout.readline())
        os.kill(agent.pid, signal.SIGKILL)  # no atexit, no cleanup: the server group survives
        agent.wait()
        assert _alive(pgid) and (tmp_path / "procs" / f"{pgid}.json").exists()
        assert reap_stale_servers(tmp_path) == [pgid]
        deadline = time.monotonic() + 5  # SIGKILL is delivered asynchronously; the orphan is reaped by init
        while _alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pgid) and not procs.live_records(tmp_path)
    finally:
        try:
            os.killpg(agent.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_pgid_file_removed_when_a_child_outlives_the_leader_until_sigkill(tmp_path):
    # Like vLLM: the leader exits on SIGTERM, a child process (engine/worker) ignores it.
    code = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import signal, time; "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); time.sleep(600)']); time.sleep(600)")
    h = ProcessHandle([sys.executable, "-c", code], log_path=tmp_path / "server-2.log")
    deadline = time.monotonic() + 10
    while "1" not in h.log_text() and time.monotonic() < deadline:  # the child has installed its handler
        time.sleep(0.05)
    h.stop(grace_s=1)
    assert not _alive(h.pgid) and not procs.live_records(tmp_path)


def _bystander():
    """A process group the tool did not start (another user's job, say)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)


def test_a_planted_pgid_file_kills_nothing(tmp_path):
    victim = _bystander()
    try:
        (tmp_path / "src" / "sglang" / "python").mkdir(parents=True)
        (tmp_path / "src" / "sglang" / "python" / "evil.pgid").write_text(str(victim.pid))  # what a patch could add
        assert reap_stale_servers(tmp_path) == [] and victim.poll() is None
    finally:
        victim.kill(), victim.wait()


def test_a_forged_or_stale_record_kills_nothing(tmp_path):
    victim = _bystander()
    try:
        d = tmp_path / "procs"
        d.mkdir()
        ident = procs.identity(victim.pid)
        (d / "1.json").write_text(json.dumps({"pgid": victim.pid, "start": ident["start"] + 1, "cmdline": ident["cmdline"]}))
        (d / "2.json").write_text(json.dumps({"pgid": victim.pid, "start": None, "cmdline": ident["cmdline"]}))
        (d / "3.json").write_text("{not json")
        (d / "4.json").write_text(json.dumps({"pgid": os.getpgrp(), "start": 0, "cmdline": []}))  # our own group
        assert reap_stale_servers(tmp_path) == [] and victim.poll() is None
        assert not procs.live_records(tmp_path)  # records that prove nothing are dropped
    finally:
        victim.kill(), victim.wait()
