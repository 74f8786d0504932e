"""Start the testbed's vLLM server: the command line and environment that work on this CPU build.

`vllm_command` / `vllm_env` are what every launcher (this file's `launch`, or the real tools'
sandboxes.local) should use. `launch` is a minimal process-group launcher kept for the build's smoke
check, which must run before (and without) the rest of inferloop.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

from testbed import paths


def vllm_command(python: Path, model_dir: Path, *, port: int, name: str = paths.MODEL_NAME,
                 extra: list[str] = ()) -> list[str]:
    # The `vllm` console script fails in this build (it looks up metadata named `vllm`); the module works.
    return [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
            "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port),
            "--max-model-len", "4096", *extra]


def vllm_env(threads: int | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["VLLM_CPU_KVCACHE_SPACE"] = env.get("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache
    # vLLM drops torch to one thread unless OMP_NUM_THREADS is set.
    env["OMP_NUM_THREADS"] = str(threads or os.cpu_count() or 1)
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    env.pop("PYTHONPATH", None)  # the testbed venv must not see this repo's packages
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Launched:
    def __init__(self, proc: subprocess.Popen, url: str, log_path: Path):
        self.proc, self.url, self.log_path = proc, url, log_path

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        # vLLM's engine core is a child in the same group; make sure nothing of the group survives.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def __enter__(self) -> "Launched":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def launch(model_dir: Path, log_path: Path, *, python: Path | None = None, extra: list[str] = (),
           timeout_s: float = 600, port: int | None = None) -> Launched:
    port = port or free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = vllm_command(python or paths.venv_python(), model_dir, port=port, extra=list(extra))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=vllm_env(),
                                start_new_session=True, stdin=subprocess.DEVNULL)
    server = Launched(proc, f"http://127.0.0.1:{port}", log_path)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {proc.returncode} before ready; log tail:\n"
                                   + "\n".join(server.log_text().splitlines()[-30:]))
            if time.monotonic() > deadline:
                raise TimeoutError(f"vLLM not ready after {timeout_s:.0f}s; log tail:\n"
                                   + "\n".join(server.log_text().splitlines()[-30:]))
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(server.url + "/health", timeout=2).status_code == 200:
                    return server
            time.sleep(1)  # polling interval, not a race cover: readiness is checked each time
    except BaseException:
        server.stop()
        raise


def ask(url: str, question: str, *, model: str = paths.MODEL_NAME, max_tokens: int = 32) -> str:
    r = httpx.post(url + "/v1/chat/completions", timeout=120, json={
        "model": model, "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens, "temperature": 0})
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"]
