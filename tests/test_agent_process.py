"""The test helper that runs the agent with a time limit interrupts it (SIGTERM, as the CLI's
own Ctrl-C) instead of SIGKILLing it, so an overrunning agent still stops the servers it started."""
import sys

import pytest

from tests import agent_process

CHILD = """
import signal, sys, time
def stop(*_):
    open(sys.argv[1], "w").write("stopped my servers")
    sys.exit(130)
signal.signal(signal.SIGTERM, stop)
time.sleep(60)
"""


def test_an_overrun_is_interrupted_so_the_child_cleans_up_and_the_test_fails(tmp_path):
    marker = tmp_path / "cleaned"
    with pytest.raises(pytest.fail.Exception, match="still running after 5 s; interrupted \\(rc 130\\)"):
        agent_process.run([sys.executable, "-c", CHILD, str(marker)], 5)  # 5 s: the child is past its start-up
    assert marker.read_text() == "stopped my servers"


def test_a_finished_run_returns_its_output():
    r = agent_process.run([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"], 30)
    assert (r.returncode, r.stdout) == (3, "out\n")
