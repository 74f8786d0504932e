"""Fixtures for tests against the real vLLM CPU testbed: one shared server for the session
(started with --enforce-eager: ready in ~30 s instead of 140-190 s), a factory for more servers,
and the `agent` CLI as a user runs it."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sandboxes.testbed.serve import launch
from tests import agent_process

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def agent_cli():
    """Run the real `agent` CLI in a subprocess; `agent_cli.json(...)` adds --json and parses."""
    class Cli:
        argv = staticmethod(agent_process.agent)

        @staticmethod
        def run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
            return agent_process.run(agent_process.agent(*args), timeout, cwd=REPO)

        @staticmethod
        def json(*args: str, timeout: float = 600) -> dict:
            r = Cli.run(*args, "--json", timeout=timeout)
            assert r.returncode == 0, f"agent {' '.join(args)} exited {r.returncode}:\n{r.stderr[-3000:]}"
            return json.loads(r.stdout)
    return Cli


@pytest.fixture(scope="session")
def start_vllm(testbed):
    """start_vllm(run_dir, {"--flag": value}) -> a running real server (eager mode), launched by
    inferloop's LocalSandbox (tools.server.RunningServer); stop it yourself or use `with`."""
    def start(run_dir: Path, flags: dict | None = None, ready_timeout_s: float = 600):
        return launch(Path(run_dir), flags, base=testbed.root, ready_timeout_s=ready_timeout_s)
    return start


@pytest.fixture(scope="session")
def vllm_server(start_vllm, tmp_path_factory):
    """The session's shared real server (default flags, eager mode)."""
    server = start_vllm(tmp_path_factory.mktemp("vllm"))
    try:
        yield server
    finally:
        server.stop()
