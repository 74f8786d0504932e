"""Who is still alive: the process table read from /proc (Linux), without psutil."""
from __future__ import annotations

import os
import time
from pathlib import Path


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process in a process group; zombies ('Z') are listed too."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # exited while we looked
        # The fields after the command name (which may hold spaces or parentheses) follow the last ')'.
        fields = stat[stat.rindex(")") + 2:].split()
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid:
            out.append((int(entry), state))
    return out


def wait_group_gone(pgid: int, timeout_s: float = 15.0) -> list[tuple[int, str]]:
    """Poll until no process of the group is left (SIGKILLed processes take a moment to be torn
    down and reaped); return what is still there at the deadline ([] = all gone)."""
    deadline = time.monotonic() + timeout_s
    while (left := group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.2)  # polling interval; the condition is re-checked each time
    return left
