"""The tool's own records of the process groups it started, so a resumed run can stop what a
killed agent left running, and nothing else (issue 13 item 2).

A record is `<run_dir>/procs/<pgid>.json` with the leader's pid, its start time (field 22 of
/proc/PID/stat, in clock ticks since boot) and its command line, written right after the
start. Only these files name what `reap` may kill (never a `*.pgid` a patch or a server wrote
somewhere under the run dir), and a group is killed only when it is provably the one started:
its leader still has the recorded start time and leads its own session, or, the leader gone,
processes of that group remain (Linux reuses no pid while a group of that id exists, so the id
still names our group). A record that fails the check is removed without killing anything.
(pid, start time) names one process for the life of the machine; the command line is kept for
the reader only, since right after Popen the child may not have exec'd yet.
Things that are not process groups (a ground's containers) have records of their own kind,
`<run_dir>/procs/<kind>-<id>.json`; the ground that makes them registers how to check and remove
one (`register_kind`), since this layer knows no engine.
"""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Callable

from tools.atomic import write_whole

RECORDS = "procs"
# kind -> reaper(record) -> what it removed (None: not ours any more, nothing done)
_KINDS: dict[str, Callable[[dict], str | None]] = {}


def register_kind(kind: str, reaper: Callable[[dict], str | None]) -> None:
    _KINDS[kind] = reaper


def record_other(run_dir: Path, kind: str, ident: str, extra: dict | None = None) -> Path:
    """Write the record of something else this process started (e.g. a container), by id."""
    d = Path(run_dir) / RECORDS
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{kind}-{ident[:24]}.json"
    write_whole(path, json.dumps({"kind": kind, "id": ident, **(extra or {})}))
    return path


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses


def identity(pid: int) -> dict | None:
    """{"start": ticks since boot, "cmdline": [...]} of a live process, None if there is none."""
    st = _stat(pid)
    if st is None or st[0] == "Z":
        return None
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return {"start": int(st[19]), "sid": int(st[3]),
            "cmdline": [a.decode(errors="replace") for a in raw.split(b"\0") if a]}


def group_members(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            st = _stat(int(d.name))
            if st is not None and st[0] != "Z" and int(st[2]) == pgid:
                out.append(int(d.name))
    return out


def record(run_dir: Path, pid: int) -> Path:
    """Write the record of a group leader this process just started (start_new_session=True)."""
    d = Path(run_dir) / RECORDS
    d.mkdir(parents=True, exist_ok=True)
    ident = identity(pid) or {"start": None, "cmdline": []}
    path = d / f"{pid}.json"
    write_whole(path, json.dumps({"pgid": pid, **ident}))  # a reader never sees half a record
    return path


def owned(rec: dict) -> bool:
    """Whether the group the record names is still the one we started."""
    pgid = rec.get("pgid")
    if not isinstance(pgid, int) or pgid <= 1 or pgid == os.getpgrp():
        return False
    now = identity(pgid)
    if now is not None:
        return now["start"] == rec.get("start") and now["sid"] == pgid
    return bool(group_members(pgid))  # leader exited; its group lives on, so its id is not reused


def reap(run_dir: Path) -> list:
    """SIGKILL the recorded groups that are provably ours, remove recorded things of a registered
    kind that still are; drop every record (but those of a kind nobody registered here, kept for
    whoever can). Killed pgids and removed names."""
    killed: list = []
    d = Path(run_dir) / RECORDS
    for f in sorted(d.glob("*.json")) if d.is_dir() else []:
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            rec = {}
        kind = rec.get("kind") if isinstance(rec, dict) else None
        if kind is not None:
            if kind not in _KINDS:
                continue
            try:
                gone = _KINDS[kind](rec)
            except Exception:  # its engine cannot be asked now: keep the record for a later resume
                continue
            if gone:
                killed.append(gone)
        elif isinstance(rec, dict) and owned(rec):
            try:
                os.killpg(rec["pgid"], signal.SIGKILL)
                killed.append(rec["pgid"])
            except (ProcessLookupError, PermissionError):
                pass
        f.unlink(missing_ok=True)
    return killed


def live_records(run_dir: Path) -> list[Path]:
    d = Path(run_dir) / RECORDS
    return sorted(d.glob("*.json")) if d.is_dir() else []
