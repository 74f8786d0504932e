"""Cross-phase speculation for the parallel driver (agent/parallel.py, issue 18).

A phase's last trials often leave nodes idle: the next phase builds on this phase's winner, which
is not decided yet (a winner is repeated and evaluated before it is kept). Rather than wait, the
driver proposes the next phase's candidates on a *provisional* incumbent: the one the open trials
would leave if each were decided on its first measurement, in proposal order (often the
incumbent itself). A sequential search's points (Optuna, Proposal.params) are treated the same way
while the phase's screens are open: they build on what the screens found. Each candidate is a
full configuration, decided later in proposal order against whatever the real incumbent is by
then: one built on a winner is what the run would have proposed anyway, one built on a loser just
loses (and spends a trial of the budget).

The driver speculates once every open trial's first measurement is back (`quiet`), so the
provisional incumbent is read from all of them; at that ground time only follow-ups (repeats,
evals) keep nodes busy, and the others may take new trials however many measured ones wait to be
decided. It also speculates, on the incumbent, as soon as the phase has kept a trial and what is
still open of the phase is built on it (`settled`): an open trial then replaces the incumbent only
by beating it, and whatever ran ahead is decided against that one in its turn. (The driver handles
results in ground-time order, agent/parallel.py: what it builds on existed by the time the
speculative task starts.)
"""
from __future__ import annotations

from agent.decide import EVALUATE, KEEP, decide
from agent.planners.base import PHASES
from agent.worker import FIRST

AHEAD = 1  # phases a speculative candidate may run ahead of the phase being decided


def quiet(queue: list) -> bool:
    """Every open trial's first measurement is back (what is out is follow-ups: repeats, evals):
    the provisional incumbent is then read from all of them."""
    return bool(queue) and all(task.need != FIRST for o in queue for task, _ in o.out.values())


def settled(led, queue: list, inc: int | None, phase: str) -> bool:
    """The phase being decided has kept a trial (the incumbent is its own) and every open trial is
    a configuration of that phase built on the incumbent: the next phase may build on the
    incumbent before their first measurements are back. (Before the phase has kept anything, its
    open trials are what the next phase should build on, and a failure among them is answered in
    this phase first.)"""
    if inc is None or led.trial(inc)["phase"] != phase:
        return False
    return all(o.phase == phase and o.base == inc and o.kind != "patch" and not o.review for o in queue)


def allowed(queue: list, base: str, phase: str) -> bool:
    """May a candidate of `phase` run ahead while the base phase's trials are open? (The driver
    asks only at a quiet or settled point.)"""
    if any(o.kind == "patch" or o.review for o in queue):
        return False  # a patch or a human review stays a barrier (a patch changes the driver's tree)
    ahead = PHASES.index(phase) - PHASES.index(base)
    return 0 <= ahead <= AHEAD


def provisional(led, queue: list, inc: int | None, objective: str, gate) -> int | None:
    """The incumbent the open trials would leave if each were decided on its first measurement
    alone, in proposal order (the keep/revert rule's own test: one that passes on performance is
    taken as kept; one within noise or worse as reverted). Only first measurements count: a
    follow-up of the head may or may not be back yet."""
    if inc is None:
        return None
    cur, series = inc, [m["data"] for m in led.measurements(inc, "candidate")]
    for o in queue:
        if o.first_data is None or o.kind == "patch":
            continue
        if decide(series, [o.first_data], objective, gate).decision in (KEEP, EVALUATE):
            cur, series = o.tid, [o.first_data]
    return cur


def first_data(res: dict) -> dict | None:
    """A first task's candidate measurement: None where it ended the trial (failed; a trial is
    kept only by the driver's decision) or measured nothing."""
    if res.get("result"):
        return None
    return next((data for role, data, _, _ in res["rows"] if role == "candidate"), None)
