"""The run's typed records: what the ledger holds, read back as models instead of loose dicts.

A Verdict is decide.py's answer: a decision, a reason *code* and the numbers behind it, with the
prose reason rendered from those. Code that acts on a verdict reads the code, never the prose.
A trial's measurement data stays the plain JSON decide.py documents (agent/decide.py); graph
state stays plain JSON holding trial ids.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from tools.candidate import Candidate

Decision = Literal["keep", "revert", "repeat", "evaluate"]
# Why a verdict is what it is. decide.py's codes, then the ones a trial ends with before decide.
Code = Literal[
    "baseline", "baseline_no_slo", "baseline_needs_evals",
    "gain", "gain_evals_pass", "no_gain", "within_noise", "not_beyond_noise", "single_stream_drop",
    "single_stream_repeat",
    "pareto", "pareto_evals_pass", "pareto_repeat",
    "needs_evals", "eval_regression", "superseded",
    "launch_failed", "requests_refused", "error", "moe_not_engaged", "patch_failed",
    "review_rejected", "review_skipped"]
TrialStatus = Literal["proposed", "running", "done"]
TrialVerdict = Literal["kept", "reverted", "failed", "rejected", "skipped"]
Outcome = Literal["launched", "launch_failed"]
Role = Literal["candidate", "incumbent"]
# A run's status (ledger meta "status"): agent/run.py moves it while it drives the graph, the record
# node ends it, a Ctrl-C marks it interrupted.
RunStatus = Literal["running", "waiting_for_review", "interrupted", "done", "failed", "refused"]
FINAL: tuple[RunStatus, ...] = ("done", "failed", "refused")


class Verdict(BaseModel):
    """decide()'s answer for a candidate's measurements so far."""
    decision: Decision
    code: Code
    reason: str  # rendered from code and numbers, for people
    numbers: dict


class Result(BaseModel):
    """How a trial ended: what Ledger.finish_trial records."""
    verdict: TrialVerdict
    code: Code
    reason: str
    numbers: dict = {}
    ground_s: float | None = None

    @classmethod
    def of(cls, v: Verdict, ground_s: float | None) -> "Result":
        assert v.decision in ("keep", "revert"), v.decision
        return cls(verdict="kept" if v.decision == "keep" else "reverted", code=v.code, reason=v.reason,
                   numbers=v.numbers, ground_s=ground_s)


class Measurement(BaseModel):
    id: int
    trial_id: int
    role: Role
    seq: int
    data: dict  # decide.py's measurement JSON
    wall_s: float | None = None
    ground_s: float | None = None
    created: float


class Trial(BaseModel):
    id: int
    phase: str
    kind: Literal["config", "patch", "moe_tune", "stop"]
    description: str
    rationale: str = ""
    candidate: Candidate
    incumbent_id: int | None = None
    proposal: dict = {}
    status: TrialStatus
    outcome: Outcome | None = None
    verdict: TrialVerdict | None = None
    reason: str | None = None
    reason_code: Code | None = None  # None: a trial from a ledger older than reason codes
    numbers: dict | None = None
    diagnoses: list[dict] = []
    log_excerpt: str = ""
    patch_id: str | None = None
    created: float
    started: float | None = None
    ended: float | None = None
    wall_s: float | None = None
    ground_s: float | None = None
