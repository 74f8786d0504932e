"""Containers as the docker sandbox runs them: a `tools.server.Handle` over one container (its
output streamed into the run dir), the engine connection (BadInput saying what to do when no
engine answers), and the reaper `agent resume` uses for containers a killed agent left running
(registered with tools/procs.py as the `container` kind of record)."""
from __future__ import annotations

import atexit
import os
import threading
import weakref
from pathlib import Path

from tools import logs, procs
from tools.errors import BadInput

_live: "weakref.WeakSet[ContainerHandle]" = weakref.WeakSet()


@atexit.register
def _remove_all() -> None:  # an agent that exits (an error, Ctrl-C) leaves no container behind
    for h in list(_live):
        h.stop(grace_s=2.0)


class ContainerHandle:
    """A container as a `tools.server.Handle`: status, logs (streamed into a file in the run dir
    while it runs), stop+remove. Its record (tools/procs.py) lets `agent resume` remove it when
    the agent was killed before it could."""

    def __init__(self, container, log_path: Path, record: Path | None = None):
        self.c, self.log_path, self.record = container, log_path, record
        self._stopped = False
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._follow = threading.Thread(target=self._stream, daemon=True)
        self._follow.start()
        _live.add(self)

    def _stream(self) -> None:
        """Append the container's output to the log file as it comes (until it stops)."""
        with open(self.log_path, "ab") as f:
            try:
                for chunk in self.c.logs(stdout=True, stderr=True, stream=True, follow=True):
                    f.write(chunk)
                    f.flush()
            except Exception:  # the container went away: what came is in the file
                pass

    def poll(self) -> int | None:
        try:
            self.c.reload()
        except Exception:  # removed behind our back: treat as dead
            return -1
        if self.c.status in ("exited", "dead"):
            self._follow.join(timeout=10)  # its stream ends with it: the log file then has its last words
            return int(self.c.attrs.get("State", {}).get("ExitCode", -1))
        return None

    def log_text(self) -> str:
        return logs.read(self.log_path)

    def stop(self, grace_s: float = 10.0) -> None:
        if self._stopped:
            return
        try:
            self.c.stop(timeout=int(grace_s))
        except Exception:  # already gone, or the engine refused: removal below still tries
            pass
        self._follow.join(timeout=10)  # the stream ends with the container: the log is complete
        try:
            self.c.remove(force=True, v=True)  # v: anonymous volumes an image declares go too
            gone = True
        except Exception as e:
            gone = "No such container" in str(e) or getattr(e, "status_code", None) == 404
        if gone and self.record is not None:
            self.record.unlink(missing_ok=True)
        self._stopped = True
        _live.discard(self)


def connect():
    """A docker client that has answered a ping; BadInput saying what to do when no engine answers."""
    import docker
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as e:
        raise BadInput(f"the docker engine at {where} is not answering ({str(e).splitlines()[0][:160]}); start it "
                       "(`sudo systemctl start docker`, or `sudo dockerd &`), or set DOCKER_HOST to one that "
                       "runs, or use --backend local") from None
    return client


def _reap_container(rec: dict) -> str | None:
    """Remove the container a record names if it still carries the record's token (only what this
    run started); its id when removed."""
    import docker.errors
    client = connect()  # no engine: raises, and the record stays for a later resume
    try:
        c = client.containers.get(rec["id"])
    except docker.errors.NotFound:  # gone already: nothing of ours runs
        return None
    if (c.labels or {}).get("inferloop.record") != rec.get("token"):
        return None
    c.remove(force=True, v=True)
    return c.name


procs.register_kind("container", _reap_container)
