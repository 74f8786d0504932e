"""Time bounds for the LLM planner's API (issue 13): a hung OpenAI-compatible server used to cost
four 60 s timeouts, about 245 s, on every decision of a run.

- Each call has connect and read timeouts (httpx's, clipped to what is left of the decision).
- Each decision has a total deadline, enforced as a hard bound: the call runs in a daemon thread and
  the decision stops waiting at the deadline. A read timeout alone does not end a call whose server
  trickles a byte now and then.
- A breaker: after `after` consecutive decisions in which the API could not answer, the planner stops
  calling it for the rest of the run (or, with a cool-down, until `cooldown_s` has passed; then one
  decision probes it again, and one more failure switches it off again).
So a hung server costs at most `after` x the decision deadline in a whole run.
"""
from __future__ import annotations

import threading
import time
from typing import Callable


class Deadline:
    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic):
        self.seconds, self.clock = seconds, clock
        self.end = clock() + seconds

    def left(self) -> float:
        return self.end - self.clock()


class TimedOut(Exception):
    """The call had not answered when the decision's deadline came."""


def call_within(fn: Callable[[], object], seconds: float):
    """fn()'s result or exception, or TimedOut after `seconds`. A call that overruns is left to end
    on its own timeouts in its daemon thread; its answer, if one comes, is dropped."""
    done = threading.Event()
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  handed to the caller's thread
            box["error"] = e
        done.set()

    threading.Thread(target=run, daemon=True, name="llm-call").start()
    if not done.wait(max(seconds, 0.0)):
        raise TimedOut()
    if "error" in box:
        raise box["error"]
    return box["value"]


class Breaker:
    """Counts consecutive decisions in which the API could not answer."""

    def __init__(self, after: int, cooldown_s: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.after, self.cooldown_s, self.clock = after, cooldown_s, clock
        self.failures = 0
        self.opened_at: float | None = None
        self.last = ""

    def allows(self) -> bool:
        """May this decision call the API? After a cool-down, one probing decision may."""
        if self.opened_at is None:
            return True
        if self.cooldown_s is not None and self.clock() - self.opened_at >= self.cooldown_s:
            self.opened_at, self.failures = None, self.after - 1  # half open: one more failure re-opens
            return True
        return False

    def failed(self, why: str) -> bool:
        """Record an unreachable decision; True when this one switches the API off."""
        self.failures += 1
        self.last = why
        if self.failures >= self.after and self.opened_at is None:
            self.opened_at = self.clock()
            return True
        return False

    def succeeded(self) -> None:
        self.failures, self.opened_at = 0, None

    def reason(self) -> str:
        until = ("for the rest of the run" if self.cooldown_s is None
                 else f"for {self.cooldown_s:g} s")
        return (f"stopped calling the API {until} after {self.after} consecutive decisions in which it "
                f"could not answer (last: {self.last})")
