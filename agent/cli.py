"""The `agent` command. Each group of commands lives in its own module and registers here;
this file only wires them and turns BadInput into a one-line error with exit code 2."""
from __future__ import annotations

import logging
import signal
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


_registered = False


def _register() -> None:
    # Imported here so `agent --help` stays fast and a broken optional module names itself.
    # Grounds add their own commands (the simulator's `agent estimate`) through the registry.
    # Once per process: typer keeps every registration, so each main() call in one process (the
    # tests call it in-process) would add every command again and build them all (a bad-value
    # error took 0.29 s after 16 in-process runs instead of 0.02 s).
    global _registered
    if _registered:
        return
    from agent import cmd_bench, cmd_optimize, cmd_playbook
    from sandboxes import registry
    for add in registry.commands():
        add(app)
    for mod in (cmd_bench, cmd_optimize, cmd_playbook):
        mod.register(app)
    _registered = True


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


class _Stderr(logging.Handler):
    """Writes to whatever sys.stderr is at the time (a test's capture, a redirected run)."""

    def emit(self, record: logging.LogRecord) -> None:
        print(record.getMessage(), file=sys.stderr, flush=True)


def _progress_to_stderr() -> None:
    """Progress of long work (server start-up, sweep levels) logged by tools/ reaches stderr as
    plain lines; stdout stays for results (and --json)."""
    log = logging.getLogger("inferloop")
    if not any(isinstance(h, _Stderr) for h in log.handlers):
        log.addHandler(_Stderr())
    log.setLevel(logging.INFO)
    log.propagate = False


def main(argv: list[str] | None = None) -> None:
    _register()
    _progress_to_stderr()
    # SIGTERM takes the same way out as Ctrl-C: servers stopped, the ledger consistent, a resume
    # hint (agent/cmd_optimize.py). SIGINT gets Python's handler even where the parent ignored it.
    before = {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        app(args=argv, standalone_mode=True)
    except BadInput as e:
        from tools.inert import inert_line
        msg = inert_line(e)  # messages quote user and file text
        typer.echo(f"error: {msg}", err=True)
        args = sys.argv[1:] if argv is None else argv
        if "--json" in args[:args.index("--") if "--" in args else None]:  # a script reads stdout: say it there too
            import json
            typer.echo(json.dumps({"error": msg, "exit_code": 2}))
        sys.exit(2)
    except KeyboardInterrupt as e:
        typer.echo(f"interrupted ({e or 'SIGINT'})", err=True)
        sys.exit(130)
    finally:
        for sig, h in before.items():
            signal.signal(sig, h)


if __name__ == "__main__":
    main()
