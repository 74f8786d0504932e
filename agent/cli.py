"""The `agent` command. Each group of commands lives in its own module and registers here;
this file only wires them and turns BadInput into a one-line error with exit code 2."""
from __future__ import annotations

import sys

import typer

from agent.errors import BadInput

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="inferloop: make an LLM deployment faster and cheaper, measured and verified.")


@app.callback()
def _root() -> None:
    """inferloop: make an LLM deployment faster and cheaper, measured and verified."""


@app.command()
def version() -> None:
    """Print the version of inferloop."""
    from importlib.metadata import version as v
    typer.echo(v("inferloop"))


def _register() -> None:
    # Imported here so `agent --help` stays fast and a broken optional module names itself.
    from agent import cmd_estimate, cmd_bench, cmd_optimize, cmd_playbook
    for mod in (cmd_estimate, cmd_bench, cmd_optimize, cmd_playbook):
        mod.register(app)


def main(argv: list[str] | None = None) -> None:
    _register()
    try:
        app(args=argv, standalone_mode=True)
    except BadInput as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
