"""The hybrid planner: the built-in phases and search decide, and the LLM is asked only where fixed
rules run out:
- a launch failure the fix catalogue has no answer for (the built-in planner would move on), and
- a phase that stalls (the built-in planner is about to leave a phase in which nothing was kept, or
  has nothing left at all).
Whatever the LLM proposes goes through the same nodes (review for patches, the keep rule for
everything); when it has nothing (stop, no valid proposal, API down) the built-in proposal stands.

Also `make_planner`: the `--planner builtin|llm|hybrid` choice -> a planner object.
"""
from __future__ import annotations

import json
from pathlib import Path

from agent.errors import BadInput, unknown
from agent.planners.base import PHASES, PlanContext, Proposal
from agent.planners.llm import LLMPlanner

PLANNERS = ("builtin", "llm", "hybrid")


class HybridPlanner:
    name = "hybrid"

    def __init__(self, llm: LLMPlanner, builtin=None, *, attempts_per_failure: int = 2):
        if builtin is None:
            from agent.planners.builtin import BuiltinPlanner
            builtin = BuiltinPlanner()
        self.llm, self.builtin, self.attempts = llm, builtin, attempts_per_failure
        # Questions already put to the LLM in this process (the ledger keeps its answers; after a
        # resume a question may be asked once more, which costs tokens but changes no result).
        self._asked: set[tuple] = set()

    def propose(self, ctx: PlanContext) -> Proposal:
        b = self.builtin.propose(ctx)
        if not ctx.trials or b.fixes_trial is not None:  # baseline, or the catalogue knows this failure
            return b
        focus = self._unknown_failure(ctx)
        if focus is not None and ("fix", focus, len(ctx.trials)) not in self._asked:
            self._asked.add(("fix", focus, len(ctx.trials)))
            p, why = self.llm.ask(ctx, focus=focus, question=(
                f"Trial {focus} failed to launch and the built-in fix catalogue has no answer for it. Read its "
                "log and the framework source, find the cause, and propose the fix (a patch or a flag/env "
                "change). Call stop if it cannot be fixed from here."))
            if p is not None and p.kind != "stop":
                return p
            self.llm.notify(f"  LLM found no fix for trial {focus} ({why or p.rationale}); continuing with the built-in plan")
        phase = ctx.phase
        if self._stalled(ctx, phase, b) and ("stall", phase) not in self._asked:
            self._asked.add(("stall", phase))
            p, _ = self.llm.ask(ctx, question=(
                f"The {phase} phase has stalled: nothing tried in it was kept, and the built-in planner would "
                f"now {'stop' if b.kind == 'stop' else 'move on to: ' + b.description}. Is there one thing worth "
                "trying first? Call stop if not."))
            if p is not None and p.kind != "stop":
                return p
        return b

    def _unknown_failure(self, ctx: PlanContext) -> int | None:
        """The newest failed trial of the current phase that the catalogue left unanswered and the
        LLM has not exhausted its attempts on (its answers were rejected or failed)."""
        for t in ctx.failures():
            answers = ctx.answers(t["id"])
            if not answers:
                return t["id"]
            llm_only = all(x["proposal"].get("source") == "llm" for x in answers)
            if llm_only and len(answers) < self.attempts and all(
                    x["verdict"] in ("rejected", "skipped", "failed") for x in answers):
                return t["id"]
        return None

    @staticmethod
    def _stalled(ctx: PlanContext, phase: str, b: Proposal) -> bool:
        leaving = b.kind == "stop" or (b.phase in PHASES and PHASES.index(b.phase) > PHASES.index(phase))
        here = [t for t in ctx.trials if t["phase"] == phase]
        return leaving and bool(here) and not any(t["verdict"] == "kept" for t in here)


def make_planner(name: str, *, llm_model: str | None = None, run_dir: Path | None = None, ledger=None,
                 progress=None, fixes=None, scope: dict | None = None, **llm_kw):
    """The planner a run asked for. `ledger` receives the LLM's token use as "llm" events; `scope`
    is what the ground lets the built-in planner vary (its phases, the GPUs of the baseline)."""
    from agent.planners.builtin import BuiltinPlanner
    if name not in PLANNERS:
        raise unknown("planner", name, PLANNERS)
    builtin = BuiltinPlanner(**({"fixes": fixes} if fixes is not None else {}), **(scope or {}))
    if name == "builtin":
        return builtin
    if not llm_model:
        raise BadInput(f"--planner {name} needs --llm-model NAME (the model your OPENAI_BASE_URL serves)")
    record = (lambda e: ledger.event("llm", json.dumps(e))) if ledger is not None else None
    llm = LLMPlanner(model=llm_model, fallback=builtin, run_dir=run_dir, record=record, notify=progress, **llm_kw)
    return llm if name == "llm" else HybridPlanner(llm, builtin)
