"""Launch a server, wait until it is ready, stop it: for local processes and containers alike.

A `Handle` is a running thing with a log (a process group, a container). `wait_ready` watches
the handle for the framework's ready line or a 200 from its health endpoint, fails fast with a
log excerpt and a Diagnosis when it dies, and on timeout stops it with the excerpt in the error.
`RunningServer` is the `tools.protocols.Server` over a handle (a context manager like vLLM's
`RemoteOpenAIServer`). Every process runs in its own session so stop() kills the whole group,
also on Ctrl-C and on exceptions (and at interpreter exit for anything left behind).
"""
from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import subprocess
import time
import weakref
from pathlib import Path
from typing import Callable, Protocol

import httpx

from tools import logs, procs
from tools.inert import inert_line
from tools.frameworks.signatures import diagnose as default_diagnose, primary
from tools.protocols import Diagnosis, LaunchFailure

_PORT_TAKEN = ("Address already in use", "[Errno 98]", "address already in use")


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (the OS picks it; a race is handled by relaunching)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class Handle(Protocol):
    def poll(self) -> int | None: ...  # exit code, None while running
    def log_text(self) -> str: ...
    def stop(self, grace_s: float = 10.0) -> None: ...  # SIGTERM, then SIGKILL after grace_s


PROGRESS_S = 15.0  # how often a server start-up says where it is
log = logging.getLogger("inferloop")

_live: "weakref.WeakSet[ProcessHandle]" = weakref.WeakSet()


@atexit.register
def _reap_all() -> None:
    for h in list(_live):
        h.stop()


class ProcessHandle:
    """A process in its own session, stdout+stderr to a log file."""

    def __init__(self, argv: list[str], *, log_path: Path, env: dict[str, str] | None = None,
                 cwd: Path | None = None, base_env: dict[str, str] | None = None,
                 records: Path | None = None):
        self.argv, self.log_path = argv, log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "ab")
        # base_env replaces the inherited environment (e.g. a venv that must not see PYTHONPATH)
        full_env = {**(os.environ if base_env is None else base_env), **(env or {})}
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=full_env, cwd=cwd,
                                     start_new_session=True)
        self.pgid = self.proc.pid  # session leader: its pid is the group id
        # The tool's own record (tools/procs.py): if this agent is killed -9, `agent resume`
        # stops this group, after checking it is still the one started here.
        self.record_path = procs.record(records or log_path.parent, self.pgid)
        _live.add(self)

    def poll(self) -> int | None:
        return self.proc.poll()

    def log_text(self) -> str:
        return logs.read(self.log_path)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the whole group, SIGKILL what is left after the grace period, reap."""
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.pgid, sig)
            except (ProcessLookupError, PermissionError):
                break
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(self.pgid):
                break
        if self.proc.poll() is None:
            self.proc.wait()
        # The leader is reaped; its children (vLLM's engine and workers) die with the group's signal
        # but are reaped by init a moment later. Keep the pgid file until the group is really gone.
        deadline = time.monotonic() + 5.0
        while _group_alive(self.pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not _group_alive(self.pgid):
            self.record_path.unlink(missing_ok=True)
        _live.discard(self)
        if not self._log.closed:
            self._log.close()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _healthy(url: str, health_path: str | None) -> bool:
    if not health_path:
        return False
    try:
        return httpx.get(url + health_path, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def wait_ready(handle: Handle, *, url: str, ready_line: str | None, health_path: str | None,
               timeout_s: float, diagnose: Callable[[str], list[Diagnosis]] = default_diagnose,
               log_path: Path | None = None, poll_s: float = 0.25) -> None:
    """Return when the server is ready; raise LaunchFailure (and stop it) otherwise. Every
    PROGRESS_S it logs the elapsed time and the log's last line, so a long start-up (minutes for
    a large model) shows where it is."""
    start = time.monotonic()
    deadline, next_note = start + timeout_s, start + PROGRESS_S
    try:
        while True:
            code = handle.poll()
            text = handle.log_text()
            if code is not None:
                diags = diagnose(text)
                d = primary(diags) or Diagnosis(
                    kind="engine_dead", message=f"the server exited with code {code} before it was ready",
                    evidence=text.splitlines()[-3:])
                handle.stop()
                raise LaunchFailure(f"server exited with code {code} before ready: {d.message}",
                                    excerpt=logs.excerpt(text, d), diagnosis=d, log_path=log_path)
            if (ready_line and ready_line in text) or _healthy(url, health_path):
                return
            if time.monotonic() > deadline:
                handle.stop()
                text = handle.log_text()
                d = Diagnosis(kind="not_ready", message=f"not ready after {timeout_s:g} s",
                              evidence=text.splitlines()[-3:], details={"timeout_s": timeout_s})
                said = (f"last log lines:\n{logs.tail(logs.redact(text), 15)}" if text.strip() else
                        "it wrote nothing to its log in that time")  # an empty quote reads as a lost log
                raise LaunchFailure(f"server not ready after {timeout_s:g} s; process group killed; {said}",
                                    excerpt=logs.excerpt(text, d), diagnosis=d, log_path=log_path)
            if time.monotonic() >= next_note:
                next_note += PROGRESS_S
                last = next((ln for ln in reversed(text.splitlines()) if ln.strip()), "")
                shown = inert_line(logs.redact(last)[:160])  # log text is data: shown inert
                log.info("    server starting, %.0f s: %s", time.monotonic() - start, shown)
            time.sleep(poll_s)  # polling interval of the readiness probe
    except BaseException as e:  # Ctrl-C or any error while waiting: never leave the server behind
        _stop_for(handle, type(e))
        raise


class RunningServer:
    """`tools.protocols.Server` over a handle."""

    def __init__(self, handle: Handle, *, url: str, model: str, log_path: Path | None = None,
                 tokenizer_dir: Path | None = None):
        self.handle, self.url, self.model, self.log_path = handle, url, model, log_path
        self.tokenizer_dir = tokenizer_dir  # the served model's tokenizer: exact prompt token counts
        self._client = None

    @property
    def client(self):
        if self._client is None:
            from tools.bench.client import OpenAIClient
            from tools.bench.prompts import PromptMaker, load_tokenizer
            tok = self.tokenizer_dir
            maker = PromptMaker(load_tokenizer(tok)) if tok and (Path(tok) / "tokenizer.json").is_file() else None
            self._client = OpenAIClient(self.url, self.model, prompts=maker)
        return self._client

    def log_text(self) -> str:
        return self.handle.log_text()

    def diagnose(self) -> list[Diagnosis]:
        return default_diagnose(self.log_text())

    def alive(self) -> bool:
        return self.handle.poll() is None

    def stop(self) -> None:
        self.handle.stop()

    def __enter__(self) -> "RunningServer":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        _stop_for(self.handle, exc_type)


# Ctrl-C or SIGTERM must end the run within seconds (issue 20): the user asked to stop, so the
# server gets a short grace before SIGKILL instead of the usual time to drain.
INTERRUPT_GRACE_S = 2.0


def _stop_for(handle: Handle, exc_type) -> None:
    if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
        handle.stop(grace_s=INTERRUPT_GRACE_S)
    else:
        handle.stop()


def launch_process(argv_for_port: Callable[[int], list[str]], *, run_dir: Path, model: str,
                   ready_line: str | None, health_path: str | None = "/health",
                   env: dict[str, str] | None = None, host: str = "127.0.0.1", port: int | None = None,
                   timeout_s: float = 900.0, diagnose: Callable[[str], list[Diagnosis]] = default_diagnose,
                   attempts: int = 3, cwd: Path | None = None,
                   base_env: dict[str, str] | None = None, tokenizer_dir: Path | None = None) -> RunningServer:
    """Start `argv_for_port(port)` as a local process group and wait until it serves.
    A requested port that is taken is replaced by a free one; a launch that dies because its
    port was grabbed meanwhile is retried on another port."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(attempts):
        p = port if (port and attempt == 0 and port_free(port, host)) else free_port(host)
        log_path = run_dir / f"server-{p}.log"
        argv = argv_for_port(p)
        (run_dir / "launch.txt").write_text(logs.redact(" ".join(argv)) + "\n")
        handle = ProcessHandle(argv, log_path=log_path, env=env, cwd=cwd, base_env=base_env, records=run_dir)
        url = f"http://{host}:{p}"
        try:
            wait_ready(handle, url=url, ready_line=ready_line, health_path=health_path,
                       timeout_s=timeout_s, diagnose=diagnose, log_path=log_path)
        except LaunchFailure as e:
            if attempt + 1 < attempts and any(s in e.excerpt for s in _PORT_TAKEN):
                continue
            raise
        return RunningServer(handle, url=url, model=model, log_path=log_path, tokenizer_dir=tokenizer_dir)
    raise AssertionError("unreachable")
