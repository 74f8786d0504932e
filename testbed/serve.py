"""Launch the testbed's vLLM server through inferloop's own tools (`sandboxes.local.LocalSandbox`,
`tools.server`): the same path `agent` uses, so every testbed run also exercises it.

What this adds is only what is specific to this CPU build: the interpreter of the testbed venv,
the served name, and the environment that makes it work (`VLLM_CPU_KVCACHE_SPACE`,
`OMP_NUM_THREADS`, no PYTHONPATH leaking this repo into the venv).
"""
from __future__ import annotations

import os
from pathlib import Path

import httpx

from testbed import paths

MAX_MODEL_LEN = 4096


def vllm_env(threads: int | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["VLLM_CPU_KVCACHE_SPACE"] = env.get("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache
    # vLLM drops torch to one thread unless OMP_NUM_THREADS is set.
    env["OMP_NUM_THREADS"] = str(threads or os.cpu_count() or 1)
    env.pop("PYTHONPATH", None)  # the testbed venv must not import this repo's packages
    return env


def sandbox(base: Path | None = None, *, ready_timeout_s: float = 900.0):
    from sandboxes.local import LocalSandbox

    return LocalSandbox(paths.model_dir(base), model_name=paths.MODEL_NAME, python=str(paths.venv_python(base)),
                        base_env=vllm_env(), ready_timeout_s=ready_timeout_s)


def candidate(flags: dict | None = None, *, eager: bool = True, env: dict[str, str] | None = None):
    """A vLLM candidate for the testbed. Eager mode (no torch.compile) is ready in ~30 s instead
    of 140-190 s: right for tests that need a real server, not its best speed."""
    from tools.candidate import Candidate

    f: dict = {"--max-model-len": MAX_MODEL_LEN}
    if eager:
        f["--enforce-eager"] = True
    f.update(flags or {})
    return Candidate(framework="vllm", flags=f, env=dict(env or {}))


def launch(run_dir: Path, flags: dict | None = None, *, eager: bool = True, base: Path | None = None,
           ready_timeout_s: float = 900.0, env: dict[str, str] | None = None):
    """A running testbed server (`tools.server.RunningServer`, a context manager); logs in run_dir."""
    return sandbox(base, ready_timeout_s=ready_timeout_s).launch(candidate(flags, eager=eager, env=env),
                                                                 Path(run_dir))


def ask(url: str, question: str, *, model: str = paths.MODEL_NAME, max_tokens: int = 32) -> str:
    r = httpx.post(url + "/v1/chat/completions", timeout=120, json={
        "model": model, "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens, "temperature": 0})
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"]
