"""The simulator registers itself as the `sim` backend (the default ground) and adds its own
command, `agent estimate`. Kept light: the engine and the performance model load only when a
sandbox is opened or an estimate runs, not when the CLI starts."""
from __future__ import annotations

from sandboxes import registry


def open_sim(cfg, card, hw):
    from sandboxes.sim import SimSandbox
    return SimSandbox(cfg.target.model, cfg.target.hw, seed=cfg.seed)


def add_commands(app) -> None:
    from sandboxes.sim import cli
    cli.register(app)


registry.register(registry.Ground("sim", open_sim, help="the simulated GPU node (default)",
                                  commands=add_commands, modeled_clock=True))
