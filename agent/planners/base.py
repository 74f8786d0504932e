"""The planner seam: what any planner (built-in phases, a playbook replayer, an LLM) receives and
returns. A planner reads; it never launches, applies or approves anything. The nodes do that.

A planner keeps no state of its own between calls: everything it knows comes from the context
(the ledger's trials, the incumbent, the model card, the hardware, the flag schemas, read-only
access to the framework source tree), so a resumed run plans exactly as the original would.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Protocol

from pydantic import BaseModel

from agent.config import RunConfig
from tools import frameworks
from tools.candidate import Candidate
from tools.frameworks.base import Framework
from tools.hardware import HardwareProfile
from tools.models import ModelCard

PHASES = ("framework", "precision", "speculative", "flags", "parallel", "moe")
Phase = Literal["framework", "precision", "speculative", "flags", "parallel", "moe"]
Kind = Literal["config", "patch", "moe_tune", "stop"]
Source = Literal["builtin", "llm", "playbook"]


class PatchProposal(BaseModel):
    fix: str  # catalogue entry (or "llm") that produced it
    key: str  # content key: a rejected key is never proposed again
    framework: str
    diff: str  # unified diff, relative to the source tree root (a/ b/ prefixes)
    files: list[str]
    title: str
    why: str  # the diagnosis it answers, in words


class Proposal(BaseModel):
    kind: Kind
    phase: Phase
    description: str  # for people; code reads the structured fields below
    rationale: str = ""
    candidate: Candidate | None = None  # what to run (a patch proposal: the candidate the patch is added to)
    patch: PatchProposal | None = None
    fixes_trial: int | None = None  # the failed trial this answers
    params: dict = {}  # search parameters (Optuna bookkeeping)
    source: Source = "builtin"  # which planner wrote it (the hybrid planner counts the LLM's answers)
    screen: str | None = None  # the flag a screening proposal sets one value of (builtin flags phase)


@dataclass
class PlanContext:
    config: RunConfig
    card: ModelCard
    hw: HardwareProfile
    trials: list[dict]  # the ledger's trials, oldest first
    measurements: Callable[[int], list[dict]]  # trial id -> its measurements (ledger rows)
    incumbent_id: int | None
    frameworks: tuple[str, ...]  # what this sandbox can run
    source_tree: Callable[[str], Path]  # framework -> its git work tree (read only for planners)
    rejected: dict[str, str] = field(default_factory=dict)  # patch key / fix name -> reason
    approved: dict[str, str] = field(default_factory=dict)  # patch key -> patch id
    # framework -> the version the sandbox runs (Sandbox.version; None or absent: the newest schema)
    versions: dict[str, str | None] = field(default_factory=dict)
    # Set by the parallel driver (agent/parallel.py) while trials of a later phase run ahead on
    # speculation: the phase its decided trials reached, which they do not move.
    at_phase: str | None = None

    def start_flags(self, fw: str) -> dict:
        """What a candidate of framework `fw` starts from: the framework's own flags for this kind of
        host (sglang on a CPU: tools/frameworks/sglang.py), then the run's base_flags its schema knows."""
        adapter = self.framework(fw)
        own = dict(getattr(adapter, "platform_flags", lambda v: {})(self.hw.vendor))
        return {**own, **{k: v for k, v in self.config.base_flags.items() if k in adapter.flags}}

    def start_env(self, fw: str) -> dict:
        return dict(getattr(self.framework(fw), "platform_env", lambda v: {})(self.hw.vendor))

    def framework(self, name: str) -> Framework:
        """The adapter (flag schema, argv, log signatures) of the version this run's sandbox runs:
        planners search only flags that version has."""
        return frameworks.get(name, self.versions.get(name))

    # ---- where the run stands: one definition for every planner ----
    @property
    def phase(self) -> str:
        """The current phase: the furthest one any trial reached (the first before any trial)."""
        if self.at_phase is not None:
            return self.at_phase
        return max((t["phase"] for t in self.trials if t["phase"] in PHASES), key=PHASES.index, default=PHASES[0])

    def answers(self, tid: int) -> list[dict]:
        """The trials proposed as answers to trial `tid` (Proposal.fixes_trial)."""
        return [t for t in self.trials if t["proposal"].get("fixes_trial") == tid]

    def failures(self) -> list[dict]:
        """Failed trials of the current phase, newest first; a baseline that started and met the SLO
        at no load level counts (the run has nothing to build on until it is answered)."""
        phase = self.phase
        return [t for t in reversed(self.trials) if t["phase"] == phase
                and (t["verdict"] == "failed" or t.get("reason_code") == "baseline_no_slo")]

    def unanswered_failures(self) -> list[dict]:
        """Failed trials of the current phase that no trial answers, newest first."""
        answered = {t["proposal"].get("fixes_trial") for t in self.trials}
        return [t for t in self.failures() if t["id"] not in answered]

    @property
    def incumbent(self) -> dict | None:
        return next((t for t in self.trials if t["id"] == self.incumbent_id), None)

    def incumbent_candidate(self) -> Candidate | None:
        t = self.incumbent
        return Candidate.model_validate(t["candidate"]) if t else None

    def tried_keys(self) -> set[str]:
        """Candidates already launched or queued (so nothing is measured twice by accident)."""
        return {Candidate.model_validate(t["candidate"]).key() for t in self.trials
                if t["kind"] != "patch" or t["verdict"] not in ("rejected", "skipped")}


def in_order(trials: list):
    """Each trial with the incumbent it was decided against (for an open one, the last kept before
    it): trials are decided in proposal order."""
    prev = None
    for z in trials:
        yield z, prev
        if z["verdict"] == "kept":
            prev = z["id"]


class Planner(Protocol):
    name: str

    def propose(self, ctx: PlanContext) -> Proposal:
        """The next thing to try, or a `stop` proposal saying why there is nothing left."""
        ...
