"""One process works a run at a time (issue 13 item 5): two `agent resume` of one run would both
measure, record duplicates and change verdicts.

The lock is an flock on `<run_dir>/run.lock`: the kernel drops it when the holder dies, even by
kill -9, so a stale lock (a dead pid) is simply taken over and no liveness guessing is needed.
The file also names the holder (pid, host, since) for the refusal message. Within one process
the lock is re-entrant: `start` -> `open_runtime`, `replay` -> `resume` take it once; the
outermost `@locked` call gives it back.
"""
from __future__ import annotations

import fcntl
import functools
import json
import os
import socket
import time
from pathlib import Path

from agent.errors import BadInput

LOCK = "run.lock"
_held: dict[Path, int] = {}  # run dir -> open file descriptor holding the flock


class RunBusy(BadInput):
    """Another live process holds the run."""


def _key(run_dir) -> Path:
    return Path(run_dir).resolve()


def _describe(info: dict) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid')} on host {info.get('host')} since {since}"


TAKEOVER_WAIT_S = 10.0


def _dead(info: dict) -> bool:
    """True when the recorded holder is provably gone (this host, no such pid)."""
    if info.get("host") != socket.gethostname() or not isinstance(info.get("pid"), int):
        return False
    try:
        os.kill(info["pid"], 0)
        return False
    except ProcessLookupError:
        return True
    except PermissionError:
        return False


def _read(path: Path) -> dict:
    try:
        d = json.loads(path.read_text() or "{}")
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def acquire(run_dir) -> None:
    """Hold the run's lock (idempotent in this process); RunBusy names the live holder."""
    key = _key(run_dir)
    if key in _held:
        return
    key.mkdir(parents=True, exist_ok=True)
    fd = os.open(key / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + TAKEOVER_WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            info = _read(key / LOCK)
            # The holder named in the file is dead, yet the lock is held: a child it was forking
            # when it was killed still has the file open until it execs. Wait for that a moment.
            if not _dead(info) or time.monotonic() > deadline:
                os.close(fd)
                raise RunBusy(f"run {str(run_dir)!r} is being worked on by {_describe(info)}; "
                              "wait for it to finish or stop that process, then `agent resume` it") from None
            time.sleep(0.05)
    info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)
    _held[key] = fd


def release(run_dir) -> None:
    fd = _held.pop(_key(run_dir), None)
    if fd is not None:
        os.close(fd)  # closing drops the flock


def holder(run_dir) -> dict | None:
    """Who holds the run now (None: nobody alive does): for `agent runs`."""
    key = _key(run_dir)
    if key in _held:
        return _read(key / LOCK)
    path = key / LOCK
    if not path.is_file():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return None
    except BlockingIOError:
        return _read(path)
    finally:
        os.close(fd)


def locked(arg: int):
    """Decorator: the run dir (positional `arg` or keyword run_dir) is locked for the call when it
    exists, and whatever this outermost call came to hold is given back when it returns."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*a, **kw):
            run_dir = kw.get("run_dir", a[arg] if len(a) > arg else None)
            outer = run_dir is not None and _key(run_dir) not in _held
            if outer and Path(run_dir).is_dir():
                acquire(run_dir)
            try:
                return fn(*a, **kw)
            finally:
                if outer:
                    release(run_dir)
        return inner
    return wrap
