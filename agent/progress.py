"""Progress of long work (sweeps, evals, trials): rich bars with ETA on a terminal, plain lines
otherwise (a log file, CI, a pipe), both on stderr so stdout stays for results and --json.

The plain lines go through logging.getLogger("inferloop") like the measuring code's own progress
lines (agent/measure.py, tools/server.py), which agent/cli.py routes to stderr; on a terminal a
rich Live display keeps the bars below those lines. `INFERLOOP_PROGRESS=plain|rich` overrides
the terminal check (tests, or a terminal that renders no live display).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from typing import Iterator

log = logging.getLogger("inferloop")


def rich_wanted(stream=None) -> bool:
    mode = os.environ.get("INFERLOOP_PROGRESS", "").lower()
    if mode in ("plain", "rich"):
        return mode == "rich"
    stream = stream or sys.stderr
    return bool(getattr(stream, "isatty", lambda: False)())


class Plain:
    """One line when a piece of work starts and one when it ends, with its count and rate."""

    def __init__(self, what: str, total: int | None, unit: str):
        self.what, self.total, self.unit, self.n, self.t0 = what, total, unit, 0, time.monotonic()
        log.info("%s: started%s", what, f" ({total} {unit})" if total else "")

    def advance(self, n: int = 1) -> None:
        self.n += n

    def note(self, msg: str) -> None:
        log.info("%s", msg)

    def close(self) -> None:
        dt = time.monotonic() - self.t0
        log.info("%s: %d %s in %.1f s (%.2f %s/s)", self.what, self.n, self.unit, dt, self.n / max(dt, 1e-9), self.unit)


class Rich:
    """A rich progress bar on stderr: done/total, elapsed, remaining (ETA)."""

    def __init__(self, what: str, total: int | None, unit: str, stream=None):
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)
        self.console = Console(file=stream or sys.stderr, force_terminal=True)
        self.p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TextColumn(unit), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                          console=self.console, transient=False)
        self.p.start()
        self.task = self.p.add_task(what, total=total)
        # Lines logged while the bar is up print above it instead of tearing it.
        self.handler = _ConsoleHandler(self.console)
        self.saved = [h for h in log.handlers]
        log.handlers = [self.handler]

    def advance(self, n: int = 1) -> None:
        self.p.advance(self.task, n)

    def note(self, msg: str) -> None:
        self.console.print(msg, markup=False, highlight=False)

    def close(self) -> None:
        log.handlers = self.saved
        self.p.stop()


class _ConsoleHandler(logging.Handler):
    def __init__(self, console):
        super().__init__()
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        self.console.print(record.getMessage(), markup=False, highlight=False)


@contextlib.contextmanager
def task(what: str, total: int | None, unit: str = "req", *, enabled: bool = True, stream=None) -> Iterator:
    """with task("sweep", 120) as bar: ... bar.advance() ... — rich on a terminal, else plain lines.
    enabled=False (e.g. --json on a pipe): a bar that shows nothing."""
    bar = (Rich(what, total, unit, stream) if rich_wanted(stream) else Plain(what, total, unit)) if enabled else _Null()
    try:
        yield bar
    finally:
        bar.close()


class _Null:
    def advance(self, n: int = 1) -> None:
        pass

    def note(self, msg: str) -> None:
        pass

    def close(self) -> None:
        pass
