"""Grounds by name: where `agent optimize --backend NAME` finds its Sandbox.

A ground registers itself when its module is imported (`register(Ground(...))`). This module only
lists where the built-in grounds live, so the agent opens a sandbox by name and never imports a
ground itself (in particular never the simulator: the loop must not know which ground it runs on).
A ground may also add its own commands to the `agent` CLI: the simulator's `agent estimate`.

A ground's opener gets the run's config (duck-typed: `.target.model/.hw/.model_path/.python`,
`.seed`, `.measure`; agent.config.RunConfig fits, but this layer must not import agent) and the
resolved model card and hardware profile, the same arguments a test's sandbox factory gets.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from tools.errors import BadInput, unknown

# the modules that register the built-in grounds when imported (a new ground adds its module here)
BUILTIN = ("sandboxes.sim.ground", "sandboxes.local", "sandboxes.docker", "sandboxes.transformers_serve")


@dataclass(frozen=True)
class Ground:
    name: str  # the --backend value
    open: Callable[..., object]  # (cfg, card, hw) -> tools.protocols.Sandbox
    help: str = ""
    # A ground that serves one framework its own way (transformers serve on a GPU) registers under
    # the backend it belongs to plus that framework; `--framework` picks it.
    framework: str | None = None
    commands: Callable[[object], None] | None = None  # register(typer_app): the ground's CLI commands
    # What the built-in planner may vary here (agent.planners.builtin.BuiltinPlanner's `phases`,
    # `gpus`); None: everything, on the whole node.
    planner_scope: dict | None = None
    # The ground's own quality gate, (cfg, run_dir) -> an EvalSuite, where the default tasks cannot
    # judge it (e.g. randomly initialised test models); None: the run's default eval suite.
    suite: Callable[..., object] | None = None
    # Its clock is a model's, not the wall's (the sim): a task's ground seconds pass in wall
    # seconds, so the parallel driver may wait for every open task and handle results in the order
    # they end on the ground clock (agent/parallel.py). Elsewhere the wall clock is the ground's.
    modeled_clock: bool = False


_GROUNDS: dict[tuple[str, str | None], Ground] = {}
_BROKEN: dict[str, str] = {}  # built-in modules that failed to import here -> the error
_loaded = False


def register(ground: Ground) -> Ground:
    _GROUNDS[(ground.name, ground.framework)] = ground
    return ground


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for mod in BUILTIN:
        try:
            importlib.import_module(mod)
        except ImportError as e:
            if e.name == mod:  # a built-in ground missing is a packaging bug, not an absent option
                raise
            _BROKEN[mod] = str(e)  # a dependency missing here (an optional SDK): that ground is absent


def names() -> tuple[str, ...]:
    """The --backend values registered here, sorted."""
    _load()
    return tuple(sorted({name for name, _ in _GROUNDS}))


def get(name: str, framework: str | None = None) -> Ground:
    """The ground for a backend (and framework, where one serves that framework its own way)."""
    _load()
    if (name, framework) in _GROUNDS:
        return _GROUNDS[(name, framework)]
    if framework is not None and (name, None) in _GROUNDS:
        own = sorted(fw for n, fw in _GROUNDS if n == name and fw is not None)
        raise BadInput(f"--framework {framework}: no {name} ground serves it on its own; allowed with --backend "
                       f"{name}: {', '.join(own) or 'none'} (leave --framework out to compare what is installed)")
    broken = [m for m in _BROKEN if m.rsplit(".", 1)[-1] == name]
    if broken:
        raise BadInput(f"--backend {name} is not available in this installation "
                       f"({_BROKEN[broken[0]]}); use {' or '.join(names())}")
    raise unknown("backend", name, names())


def open_sandbox(name: str, cfg, card, hw, *, framework: str | None = None):
    """Open the named ground's Sandbox for this run."""
    return get(name, framework).open(cfg, card, hw)


def commands() -> list[Callable[[object], None]]:
    """The CLI command hooks grounds registered, in registration order."""
    _load()
    return [g.commands for g in _GROUNDS.values() if g.commands is not None]
