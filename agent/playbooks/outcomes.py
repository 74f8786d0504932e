"""What a replay did, step by step, read from its ledger alone (trials, and the planner's skip
notes in its events): the account the report, the new playbook and `agent replay --json` give."""
from __future__ import annotations

import re
from typing import Callable

from agent.playbooks.adapt import conditions
from agent.playbooks.schema import Playbook, StepOutcome

TAG = re.compile(r"^\[playbook (s\d+)\]")


def tag(step_id: str, text: str) -> str:
    return f"[playbook {step_id}] {text}"


def step_of(t: dict) -> str | None:
    m = TAG.match(t.get("description") or "")
    return m.group(1) if m else None


def outcomes(pb: Playbook, trials: list[dict], card, hw, frameworks=None, events: list[dict] | None = None) -> list[dict]:
    """Step by step what carried over, from the ledger alone (trials, and the skip notes in events)."""
    by: dict[str, list[dict]] = {}
    for t in trials:
        sid = step_of(t)
        if sid:
            by.setdefault(sid, []).append(t)
    notes: dict[str, str] = {}
    for e in events or []:
        m = re.match(r"^(s\d+) (.*)$", e["message"]) if e["kind"] == "playbook" else None
        if m:
            notes[m.group(1)] = m.group(2)
    out = []
    for s in pb.steps:
        ts = [t for t in by.get(s.id, []) if t["status"] == "done"]
        ids = [t["id"] for t in ts]
        if ts:
            last = ts[-1]
            v = last["verdict"]
            if v == "kept":
                how = "carried over" + (" with the patch re-rendered" if last["kind"] == "patch" else
                                        " without the patch: the failure it fixed did not appear" if s.patches else "")
                o = StepOutcome(step=s.id, outcome="carried", reason=f"{how}: {last['reason']}", trials=ids)
            elif v == "reverted":
                o = StepOutcome(step=s.id, outcome="reverted", reason=last["reason"] or "", trials=ids)
            else:
                extra = notes.get(s.id, "")
                o = StepOutcome(step=s.id, outcome="failed", reason=(last["reason"] or v) + (f"; {extra}" if extra else "")
                                + "; handed over to the built-in planner", trials=ids)
        else:
            why = conditions(s, card, hw, tuple(frameworks) if frameworks else None)
            if why:
                o = StepOutcome(step=s.id, outcome="skipped", reason=why)
            elif s.id in notes:
                n = notes[s.id]
                if n.startswith("failed: "):
                    o = StepOutcome(step=s.id, outcome="failed", reason=n.removeprefix("failed: ")
                                    + "; handed over to the built-in planner")
                else:
                    o = StepOutcome(step=s.id, outcome="skipped", reason=n.removeprefix("skipped: "))
            else:
                o = StepOutcome(step=s.id, outcome="pending", reason="not reached (budget or run ended)")
        out.append(o.model_dump())
    return out



def ledger_note(led) -> Callable[[str, str], None]:
    """The planner's `note`: a step's skip reason as a ledger event, once per message."""
    def note(step_id: str, message: str) -> None:
        msg = f"{step_id} {message}"
        if not any(e["kind"] == "playbook" and e["message"] == msg for e in led.events()):
            led.event("playbook", msg)
    return note
