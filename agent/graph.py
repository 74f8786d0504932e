"""LangGraph wiring only: nodes, edges, and SqliteSaver checkpoints in the run directory.

    setup -> baseline -> [review] -> trial -> decide -> propose -> [review (interrupt) -> apply] -> trial ...
                                                         \\-> record (budget or phases exhausted) -> END

The trial node runs one candidate to its verdict (agent/trial.py: launches, repeats, evals).
"""
from __future__ import annotations

import sqlite3
from functools import partial
from pathlib import Path
from typing import TypedDict

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

from agent import nodes, report

CHECKPOINTS = "checkpoints.sqlite"
THREAD = {"configurable": {"thread_id": "run"}, "recursion_limit": 100_000}


class State(TypedDict, total=False):
    trial: int | None  # ledger trial id in flight (the incumbent is the ledger's: Ledger.incumbent)
    route: str
    stop_reason: str
    failed: str | None  # why the run ends without a result: "workload" (the user's to fix)


def _route(state: State) -> str:
    return state["route"]


def build(rt: nodes.Runtime):
    g = StateGraph(State)
    g.add_node("setup", partial(nodes.setup, rt))
    g.add_node("baseline", partial(nodes.baseline, rt))
    g.add_node("propose", partial(nodes.propose, rt))
    g.add_node("review", partial(nodes.review, rt))
    g.add_node("apply", partial(nodes.apply, rt))
    g.add_node("trial", partial(nodes.trial, rt))
    g.add_node("decide", partial(nodes.decide_node, rt))
    g.add_node("record", partial(report.record_node, rt))
    g.add_edge(START, "setup")
    g.add_edge("setup", "baseline")
    # a baseline whose env/flags need review waits like a patch does (agent/review_gate.py)
    g.add_conditional_edges("baseline", _route, {"trial": "trial", "review": "review", "propose": "propose"})
    g.add_edge("trial", "decide")
    g.add_edge("decide", "propose")
    g.add_conditional_edges("propose", _route, {"trial": "trial", "review": "review", "apply": "apply",
                                                "propose": "propose", "record": "record"})
    g.add_conditional_edges("review", _route, {"apply": "apply", "propose": "propose", "review": "review",
                                               "trial": "trial"})
    g.add_conditional_edges("apply", _route, {"trial": "trial", "propose": "propose"})
    g.add_edge("record", END)
    path = Path(rt.run_dir) / CHECKPOINTS
    if path.exists() and not _readable(path):
        # The ledger is the run's source of truth; checkpoints only say where in the graph it was.
        # Keep the damaged file for a post-mortem and let the nodes rebuild the position from the ledger.
        for f in (path, path.with_name(CHECKPOINTS + "-wal"), path.with_name(CHECKPOINTS + "-shm")):
            if f.exists():
                f.rename(f.with_name(f.name + ".unreadable"))
        rt.ledger.event("checkpoint", f"{CHECKPOINTS} was unreadable; moved aside, continuing from the ledger")
        rt.progress(f"{CHECKPOINTS} was unreadable (moved aside); continuing from the ledger")
    conn = sqlite3.connect(path, check_same_thread=False)
    return g.compile(checkpointer=SqliteSaver(conn))


def _readable(path: Path) -> bool:
    try:
        conn = sqlite3.connect(path)
        try:
            return conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
        finally:
            conn.close()
    except sqlite3.DatabaseError:
        return False
