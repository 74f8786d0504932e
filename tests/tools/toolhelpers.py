"""Helpers for the real-tools tests (a plain module: conftest files are not importable by name)."""
import os
import sys
from pathlib import Path


def mock_argv(*extra: str):
    """argv_for_port for launch_process, running the mock server directly."""
    return lambda port: [sys.executable, "-m", "tools.bench.mock_server", "--port", str(port),
                         "--model", "m", *extra]


def pid_alive(pid: int) -> bool:
    """True while the pid is in the process table (zombies count: they were not reaped)."""
    return Path(f"/proc/{pid}").exists()


def group_members(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getpgid(int(d.name)) == pgid:
                    out.append(int(d.name))
            except ProcessLookupError:
                pass
    return out
