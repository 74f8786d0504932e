"""Run the real `agent` CLI (or any process that starts servers) with a time limit that cleans up.

subprocess.run(timeout=...) SIGKILLs the child, and an agent killed that way cannot stop the
servers it launched: each runs in its own process group, so they outlive it and keep both cores
busy for every later test (a CI run lost its last half hour that way). On timeout this sends
SIGTERM, which the CLI turns into the same interrupt as Ctrl-C (its servers stopped, its ledger
marked), waits for that, and only then kills; the test then fails saying it ran out of time."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

AGENT = [sys.executable, "-c", "from agent.cli import main; main()"]  # the `agent` console script's code
GRACE_S = 60  # the CLI's own shutdown: servers get a few seconds each, the ledger is closed


def run(argv: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        pytest.fail(f"{' '.join(map(str, argv[:6]))} ... still running after {timeout:.0f} s; interrupted "
                    f"(rc {p.returncode}). Its last output:\n{(err or '')[-3000:]}", pytrace=False)
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def agent(*args: str) -> list[str]:
    """argv of `agent ARGS...` run by this interpreter."""
    return [*AGENT, *map(str, args)]
