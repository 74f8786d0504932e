"""Launch logs in each framework's own style. The sim writes text; the agent reads it with the
framework adapter's `diagnose()` — the same code that reads a real server's log."""
from __future__ import annotations

import datetime as dt

EPOCH = dt.datetime(2026, 11, 29, 8, 0, 0)


class LogWriter:
    def __init__(self, framework: str, start_s: float, pid: int = 4242):
        self.fw, self.t, self.pid = framework, start_s, pid
        self.lines: list[str] = []

    def tick(self, seconds: float) -> None:
        self.t += seconds

    def _stamp(self, fmt: str) -> str:
        return (EPOCH + dt.timedelta(seconds=self.t)).strftime(fmt)

    def line(self, msg: str, level: str = "INFO", *, where: str = "", rank: str = "") -> None:
        if self.fw == "sglang":
            tag = f" {rank}" if rank else ""
            self.lines.append(f"[{self._stamp('%Y-%m-%d %H:%M:%S')}{tag}] {msg}")
        elif self.fw == "vllm":
            prefix = f"(EngineCore_DP0 pid={self.pid + 1}) " if rank else ""
            self.lines.append(f"{prefix}{level} {self._stamp('%m-%d %H:%M:%S')} [{where or 'api_server.py:1'}] {msg}")
        else:  # atom
            self.lines.append(f"[atom {self._stamp('%H:%M:%S')}] {level} {msg}")

    def raw(self, text: str) -> None:
        self.lines.extend(text.splitlines())

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def traceback(frames: list[tuple[str, int, str]], error: str) -> str:
    out = ["Traceback (most recent call last):"]
    for f, n, fn in frames:
        out.append(f'  File "{f}", line {n}, in {fn}')
    out.append(error)
    return "\n".join(out)


def usage(prog: str, module: str) -> str:
    return f"usage: {prog} [-h] [options]\n(python -m {module})"
