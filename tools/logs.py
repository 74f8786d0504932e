"""Reading server logs: tail, grep, excerpts for errors, and log -> Diagnosis.

Log text is data: it is quoted to the user and to the LLM as evidence, never executed or obeyed.
"""
from __future__ import annotations

import re
from pathlib import Path

from tools.protocols import Diagnosis

# Secrets that must never leave a log excerpt (API keys passed through env or argv).
_SECRET = re.compile(r"(?i)((?:api[_-]?key|token|secret|password|authorization)\S*\s*[=:]\s*)(?:Bearer\s+)?\S+")


def read(path: Path | str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return ""


def tail(text: str, n: int = 40) -> str:
    return "\n".join(text.splitlines()[-n:])


def grep(text: str, pattern: str, *, context: int = 0) -> list[str]:
    """Lines matching a regex, with `context` lines around each (groups separated by '--')."""
    from tools.bounded_grep import grep_lines  # a model's pattern may backtrack forever under `re`
    lines = text.splitlines()
    hits = grep_lines(lines, pattern)
    if not context:
        return [lines[i] for i in hits]
    out: list[str] = []
    last = -1
    for i in hits:
        lo, hi = max(0, i - context, last + 1), min(len(lines), i + context + 1)
        if out and lo > last + 1:
            out.append("--")
        out += lines[lo:hi]
        last = hi - 1
    return out


def redact(text: str) -> str:
    return _SECRET.sub(lambda m: m.group(1) + "***", text)


def excerpt(text: str, diagnosis: Diagnosis | None = None, *, n: int = 30) -> str:
    """What a user needs to see about a failure: the evidence lines, then the log's tail."""
    parts = []
    if diagnosis and diagnosis.evidence:
        ev = [e for e in diagnosis.evidence if e not in tail(text, n)]
        if ev:
            parts.append("\n".join(ev))
            parts.append("...")
    parts.append(tail(text, n))
    return redact("\n".join(p for p in parts if p))
