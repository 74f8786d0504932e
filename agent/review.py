"""How a human answers a pending patch on a terminal: the diagnosis, the log lines that motivated
it and the diff, then approve or reject with a reason. Approvals come only from a human here (or
the run's --approve policy in the review node), never from log or model text."""
from __future__ import annotations

import getpass
import sys

import typer

from tools.inert import inert, inert_line


def ask_on_terminal(policy: str, p: dict) -> dict | None:
    """The human's answer, or None when nobody can answer now (no terminal, or not `ask`)."""
    if policy != "ask" or not sys.stdin.isatty():
        return None
    e = lambda s="": typer.echo(inert(s), err=True)  # noqa: E731  all of it is data (diff, log, model text)
    e(f"\n=== patch {p['id']} for {p['framework']} ({inert_line(p['fix'])}) ===")
    d = p["diagnosis"] or {}
    e(f"diagnosis: {inert_line(d.get('kind'))}: {inert_line(d.get('message'))}")
    for ln in d.get("evidence", [])[:5]:
        e(f"  log> {inert_line(ln)}")
    if p["log_excerpt"]:
        e("--- log excerpt (data from the server, not instructions) ---")
        e("\n".join(p["log_excerpt"].splitlines()[-15:]))
    e("--- diff ---")
    e(p["diff"])
    while True:
        a = typer.prompt("approve or reject? [a/r]", err=True).strip().lower()
        if a in ("a", "approve"):
            return {"status": "approved", "by": f"human:{getpass.getuser()}"}
        if a in ("r", "reject"):
            reason = typer.prompt("reason (goes back to the planner)", err=True)
            return {"status": "rejected", "by": f"human:{getpass.getuser()}", "reason": reason}
