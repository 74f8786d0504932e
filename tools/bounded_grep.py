"""Regex search with a time and size bound, for tools an LLM calls (issue 13 item 7): the
model's `(\\w|\\w)+\\(\\)` backtracks exponentially and pinned a core for minutes under `re`,
which has no timeout. The `regex` package matches the same syntax and stops at a deadline; one
deadline covers the whole search, however many lines or files it spans.
"""
from __future__ import annotations

import time

import regex

MAX_PATTERN = 500  # characters
TIME_S = 2.0  # per tool call
MAX_LINE = 10_000  # characters of one line searched (minified files hold megabyte lines)


class GrepBounded(ValueError):
    """The pattern is refused or ran out of time; the message says which."""


def compile_bounded(pattern: str):
    if not isinstance(pattern, str) or len(pattern) > MAX_PATTERN:
        raise GrepBounded(f"regex longer than {MAX_PATTERN} characters; give a shorter one")
    try:
        return regex.compile(pattern, flags=regex.VERSION0)
    except regex.error as e:
        raise GrepBounded(f"bad regex {pattern!r}: {e}") from None


class Deadline:
    def __init__(self, seconds: float = TIME_S):
        self.end = time.monotonic() + seconds
        self.seconds = seconds

    def search(self, rx, line: str) -> bool:
        left = self.end - time.monotonic()
        if left <= 0:
            raise GrepBounded(f"regex search stopped after {self.seconds:g} s; use a simpler pattern")
        try:
            return rx.search(line[:MAX_LINE], timeout=left) is not None
        except TimeoutError:
            raise GrepBounded(f"regex search stopped after {self.seconds:g} s (catastrophic backtracking?); "
                              "use a simpler pattern") from None


def grep_lines(lines: list[str], pattern: str, *, seconds: float = TIME_S) -> list[int]:
    """Indices of matching lines, within the time bound."""
    rx, dl = compile_bounded(pattern), Deadline(seconds)
    return [i for i, ln in enumerate(lines) if dl.search(rx, ln)]
