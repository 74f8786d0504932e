"""Run the agent on the fake ground in a process of its own (the kill -9 test kills it).
usage: python -m tests.agent.run_agent start|resume RUN_DIR LAUNCH_LOG"""
import sys
from pathlib import Path

from agent.run import resume, start
from tests.agent.conftest import fake_factory, fake_suite, small_config


def main() -> None:
    what, run_dir, launch_log = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    factory = fake_factory(delay_s=0.05, spawn=True, launch_log=launch_log)
    if what == "start":
        out = start(small_config(budget={"trials": 8}), run_dir, sandbox_factory=factory, suite_factory=fake_suite)
    else:
        out = resume(run_dir, sandbox_factory=factory, suite_factory=fake_suite)
    print(out["status"])


if __name__ == "__main__":
    main()
