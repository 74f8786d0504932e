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

from sandboxes.testbed import mode, paths

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


def serving_flags(base: Path | None = None) -> dict:
    """The flags of the serving mode the build proved correct on this CPU (sandboxes/testbed/mode.py)."""
    return dict(mode.load(base or paths.root())["flags"])


def candidate(flags: dict | None = None, *, mode_flags: dict | None = None, base: Path | None = None,
              env: dict[str, str] | None = None):
    """A vLLM candidate for the testbed, in the proven serving mode unless mode_flags says another
    (e.g. {} for compiled bf16): eager when it is right here, ready in ~30 s instead of 140-190 s."""
    from tools.candidate import Candidate

    f: dict = {"--max-model-len": MAX_MODEL_LEN}
    f.update(serving_flags(base) if mode_flags is None else mode_flags)
    f.update(flags or {})
    return Candidate(framework="vllm", flags=f, env=dict(env or {}))


def launch(run_dir: Path, flags: dict | None = None, *, mode_flags: dict | None = None, base: Path | None = None,
           ready_timeout_s: float = 900.0, env: dict[str, str] | None = None):
    """A running testbed server (`tools.server.RunningServer`, a context manager); logs in run_dir."""
    return sandbox(base, ready_timeout_s=ready_timeout_s).launch(
        candidate(flags, mode_flags=mode_flags, base=base, env=env), Path(run_dir))


def ask(url: str, question: str, *, model: str = paths.MODEL_NAME, max_tokens: int = 32) -> str:
    r = httpx.post(url + "/v1/chat/completions", timeout=120, json={
        "model": model, "messages": [{"role": "user", "content": question}],
        "max_tokens": max_tokens, "temperature": 0})
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"]
