"""What the `agent` commands share as a shell: where runs live by default, reading --config,
naming a run on the command line, pydantic errors as one line, printing a run's outcome (and its
exit code), and what an interrupted run says."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

import typer
from pydantic import ValidationError

from agent.config import RunConfig
from agent.errors import BadInput
from agent.ledger import LEDGER, Ledger
from tools.inert import inert

RUNS_ROOT = Path("logs")


def load_overrides(path: str | None) -> dict:
    """`--config FILE`: YAML/JSON of RunConfig fields (measure, slo, gate, base_flags, ...)."""
    if path is None:
        return {}
    from agent.safe_input import load_yaml_file
    d = load_yaml_file(path, "--config") or {}  # size-capped, UTF-8, no YAML aliases
    # the ground (backend, framework) and the target are command-line choices, not run settings
    allowed = sorted(set(RunConfig.model_fields) - {"target", "backend", "framework", "objective", "approve", "seed",
                                                  "workers", "cluster"})  # command-line options
    bad = sorted(set(d) - set(allowed)) if isinstance(d, dict) else None
    if bad is None or bad:
        raise BadInput(f"--config {path!r}: unknown keys {bad or '(not a mapping)'}; allowed: {', '.join(allowed)}")
    return d


def parse_pythons(values: list[str] | None) -> tuple[str | None, dict[str, str]]:
    """`--python PATH` (the default interpreter) and `--python FRAMEWORK=PATH` (that framework's own),
    repeatable: one framework per venv is how vLLM-CPU, sglang and transformers serve coexist."""
    from tools import frameworks

    default, per_fw = None, {}
    for v in values or []:
        name, sep, path = v.partition("=")
        if not sep:
            if default is not None:
                raise BadInput(f"--python {v!r}: a second default interpreter (first {default!r}); "
                               "name the framework: --python FRAMEWORK=PATH")
            default = v
            continue
        if name not in frameworks.NAMES + frameworks.EXTRA:
            raise BadInput(f"--python {v!r}: unknown framework {name!r}; allowed: "
                           f"{', '.join(frameworks.NAMES + frameworks.EXTRA)}")
        if not path or name in per_fw:
            raise BadInput(f"--python {v!r}: " + ("no path after '='" if not path else f"{name} given twice"))
        per_fw[name] = path
    return default, per_fw


def parse_model_paths(values: list[str] | None) -> tuple[str | None, dict[str, str]]:
    """`--model-path DIR` (one checkpoint) and `--model-path PRECISION=DIR` (one per weight precision,
    e.g. bf16=/ckpt/glm and fp8=/ckpt/glm-fp8), repeatable: on a real node a precision is a checkpoint
    of its own. A value is PRECISION=DIR where the part before its first '=' holds no '/'."""
    from tools.models import PRECISIONS

    default, named = None, {}
    for v in values or []:
        name, sep, path = v.partition("=")
        if sep and "/" not in name and name not in PRECISIONS:
            raise BadInput(f"--model-path {v!r}: unknown weight precision {name!r}; allowed: {', '.join(PRECISIONS)}")
        if not sep or "/" in name:
            if default is not None:
                raise BadInput(f"--model-path {v!r}: a second checkpoint (first {default!r}); name each by its "
                               f"precision: --model-path PRECISION=DIR ({', '.join(PRECISIONS)})")
            default = v
            continue
        if not path or name in named:
            raise BadInput(f"--model-path {v!r}: " + ("no directory after '='" if not path else f"{name} given twice"))
        named[name] = path
    return default, named


def first_error(e: ValidationError) -> str:
    from agent.config import validation_message
    return validation_message(e)


def run_dir_arg(run: str) -> Path:
    """A run named on the command line: a directory, or a name under RUNS_ROOT."""
    p = Path(run)
    if not (p / LEDGER).is_file() and (RUNS_ROOT / run / LEDGER).is_file():
        p = RUNS_ROOT / run
    if not (p / LEDGER).is_file():
        raise BadInput(f"{run!r} is not a run directory (no {LEDGER}); `agent runs` lists runs")
    return p


def progress(json_mode: bool, bar=None) -> Callable[[str], None]:
    """The run's messages on stderr (stdout carries the result); with a trials bar
    (agent/progress.py), each new trial advances it."""
    def p(msg: str) -> None:
        msg = inert(msg)  # progress lines quote planner and log text: shown inert
        if bar is None:
            typer.echo(msg, err=True)
            return
        bar.note(msg)
        if _LAUNCH_LINE.match(msg):  # agent/trial.py's line: a candidate's first launch, what the budget counts
            bar.advance()
    return p


_LAUNCH_LINE = re.compile(r"^  launching \S+ \S+ TP\d+xDP\d+ \.\.\.$")


# A run that ends without a measured configuration exits non-zero: 2 when the workload is the
# user's to change (the server refused its requests), 1 when nothing could be launched and measured.
EXIT = {"refused": 2, "failed": 1}


def emit(out: dict, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(out, indent=None, default=str))
    elif out["status"] in EXIT:
        typer.echo(f"{out['status']}: {out['run_dir']}\n{out.get('stop_reason')}", err=True)
    else:
        b = out.get("best") or {}
        typer.echo(f"{out['status']}: {out['run_dir']}  best: {b.get('framework')} {b.get('weights')} "
                   f"knee {b.get('knee_tok_s') or 0:.1f} tok/s @ {b.get('knee_rps') or 0:.2f} RPS, "
                   f"single-stream {b.get('single_stream_tok_s') or 0:.1f} tok/s")
    if out["status"] in EXIT:
        raise typer.Exit(EXIT[out["status"]])


def interrupted(rd: Path, e: KeyboardInterrupt):
    """Ctrl-C or SIGTERM: by now every server's context manager has stopped its process group and
    the ledger holds each finished measurement; say so, and how to go on (exit 130, as shells do)."""
    if (rd / LEDGER).exists():
        led = Ledger(rd)
        led.set_status("interrupted")
        led.close()
        typer.echo(f"interrupted ({e or 'SIGINT'}): the run is saved in {rd}; continue with: agent resume {rd}",
                   err=True)
    else:
        typer.echo(f"interrupted ({e or 'SIGINT'}) before the run started", err=True)
    raise typer.Exit(130)


def run_row(run_dir: Path) -> dict:
    """One line of `agent runs`; a corrupt run says so instead of breaking the list, and a run
    marked running that nobody holds (its agent was killed) shows as interrupted."""
    from agent import run_lock
    try:
        led = Ledger(run_dir)
        try:
            cfg = led.meta("config") or {}
            row = {"run": str(run_dir), "model": cfg.get("target", {}).get("model"),
                   "hw": cfg.get("target", {}).get("hw"), "status": led.meta("status"), "trials": len(led.trials())}
        finally:
            led.close()
    except Exception as e:  # noqa: BLE001  sqlite3.DatabaseError, bad JSON: one run's problem, not the list's
        return {"run": str(run_dir), "model": None, "hw": None, "status": f"unreadable ({type(e).__name__})",
                "trials": 0}
    if row["status"] in ("running", None) and run_lock.holder(run_dir) is None:
        row["status"] = "interrupted"
    return row
