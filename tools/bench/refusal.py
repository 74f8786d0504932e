"""Requests the server refuses, all the same way: stop at once instead of sending the rest.

A workload the server will not take (a prompt past its context, a parameter it rejects) fails
every request with the same HTTP status and message. Sending the rest only burns minutes (95
requests over 13 minutes in the first real run), so the load generator trips after a few
identical failures with no success, and the measurement reports the server's own words.
"""
from __future__ import annotations

import re

TRIP_AFTER = 3  # identical failures, with no success before them, that end a load level
NOT_SENT = "not sent: "  # the error of a request cancelled because the level tripped

_HTTP = re.compile(r"HTTP (\d{3})")


def signature(error: str | None) -> str | None:
    """What makes two failures 'the same': the status and the message with its numbers blanked
    (a context error names each request's own length)."""
    if not error or error.startswith(NOT_SENT):
        return None
    return re.sub(r"\d+", "#", error)[:160]


def status_of(error: str) -> int | None:
    m = _HTTP.search(error)
    return int(m.group(1)) if m else None


class Breaker:
    """Counts outcomes as they arrive; `tripped` holds the signature once TRIP_AFTER identical
    failures came with no success."""

    def __init__(self, after: int = TRIP_AFTER):
        self.after, self.ok, self.same, self.sig, self.tripped = after, 0, 0, None, None

    def add(self, ok: bool, error: str | None) -> bool:
        if ok:
            self.ok += 1
            return False
        sig = signature(error)
        if sig is None or self.ok:
            return False
        self.same = self.same + 1 if sig == self.sig else 1
        self.sig = sig
        if self.same >= self.after:
            self.tripped = sig
        return self.tripped is not None


class RequestsRefused(Exception):
    """Every request of a load level failed the same way; carries the server's own message."""

    def __init__(self, level: dict, status: int | None, message: str, failed: int, not_sent: int):
        self.level, self.status, self.message, self.failed, self.not_sent = level, status, message, failed, not_sent
        what = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in level.items())
        super().__init__(f"the server refused every request at {what} the same way ({failed} failed, "
                         f"{not_sent} not sent): {message}")

    @property
    def client_error(self) -> bool:
        """4xx: the request itself was refused (its length, its parameters), not a broken server."""
        return self.status is not None and 400 <= self.status < 500

    def diagnosis(self) -> dict:
        return {"kind": "requests_refused", "fatal": True, "evidence": [self.message],
                "message": f"the server refused every request (HTTP {self.status})" if self.status
                else "every request failed the same way",
                "details": {"status": self.status, "failed": self.failed, "not_sent": self.not_sent,
                            "level": self.level}}


def refused(level: dict, records) -> RequestsRefused | None:
    """The refusal a load level's records show, or None when anything succeeded or the failures differ."""
    errors = [r.error for r in records if not r.ok]
    if not errors or len(errors) < len(records):
        return None
    sent = [e for e in errors if signature(e) is not None]
    if len(sent) < min(TRIP_AFTER, len(records)) or len({signature(e) for e in sent}) != 1:
        return None
    return RequestsRefused(level, status_of(sent[0]), sent[0], len(sent), len(errors) - len(sent))
