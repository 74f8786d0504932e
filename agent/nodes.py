"""One function per graph node. Side effects live here (never in planners or tools an LLM can
call); graph state is plain JSON holding ids into the ledger, which holds everything else.

Every node is safe to re-run after a crash: it reads what the ledger already has (a finished
trial is never run again; a measurement already recorded is reused) and only does what is missing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from langgraph.types import interrupt

from agent import review_gate
from agent.config import RunConfig
from agent.decide import objective_value
from agent.ledger import Ledger
from agent.measure import EvalSuite
from agent.planners.base import PlanContext, Planner, Proposal
from agent.records import Result
from agent.trial import LedgerRecorder, TrialEnv, run_trial
from tools import frameworks, moe, procs
from tools import patch as patchtool
from tools.candidate import Candidate
from tools.hardware import HardwareProfile
from tools.models import ModelCard
from tools.protocols import Sandbox


@dataclass
class Runtime:
    """What the nodes act with; rebuilt (not checkpointed) on resume from the ledger's config."""
    config: RunConfig
    run_dir: Path
    ledger: Ledger
    sandbox: Sandbox
    planner: Planner
    suite: EvalSuite
    card: ModelCard
    hw: HardwareProfile
    progress: Callable[[str], None] = field(default=lambda s: None)

    def frameworks(self) -> tuple[str, ...]:
        """What the sandbox can run; `frameworks` and `version` are optional Sandbox members."""
        return tuple(getattr(self.sandbox, "frameworks", frameworks.NAMES))


# ---- helpers -------------------------------------------------------------------------------
def reap_stale_servers(run_dir: Path) -> list[int]:
    """Kill server process groups a killed agent left behind: only those the tool recorded
    itself (tools/procs.py), and only when the group is provably still the one it started."""
    return procs.reap(run_dir)


def version(rt: Runtime, framework: str) -> str | None:
    """The framework version the sandbox runs (sandboxes that cannot tell: None, the newest schema)."""
    v = getattr(rt.sandbox, "version", None)
    return v(framework) if v else None


def adapter(rt: Runtime, framework: str):
    """The framework adapter for the version the sandbox runs."""
    return frameworks.get(framework, version(rt, framework))


def plan_context(rt: Runtime, incumbent: int | None) -> PlanContext:
    led = rt.ledger
    rejected: dict[str, str] = {}
    approved: dict[str, str] = {}
    for p in led.patches():
        if review_gate.is_review(p):  # env/flag reviews are not fixes a planner can reuse
            continue
        if p["status"] in ("rejected", "skipped"):
            rejected[p["key"]] = p["reason"] or ""
            if p["status"] == "rejected":  # a human said no to this fix: never again this run
                rejected[p["fix"]] = p["reason"] or ""
        elif p["status"] == "approved":
            approved[p["key"]] = p["id"]
    return PlanContext(config=rt.config, card=rt.card, hw=rt.hw, trials=led.trials(),
                       measurements=led.measurements, incumbent_id=incumbent,
                       frameworks=rt.frameworks(),
                       source_tree=lambda fw: rt.sandbox.source_tree(fw, rt.run_dir),
                       rejected=rejected, approved=approved,
                       versions={fw: version(rt, fw) for fw in rt.frameworks()})


def _sync_tree(rt: Runtime, c: Candidate) -> None:
    """Make the framework's source tree carry exactly the candidate's patches. Every launch comes
    through here first, so this is also where unreviewed code-loading settings are stopped."""
    review_gate.require(rt.ledger, rt.config, c)
    wanted = []
    for pid in c.patches:
        p = rt.ledger.patch(pid)
        if p["status"] != "approved":
            raise patchtool.PatchRefused(f"patch {pid} is {p['status']}, not approved")
        wanted.append((pid, p["diff"], p["fix"]))
    if not wanted and not (Path(rt.run_dir) / "src" / c.framework).exists():
        # No patch wanted and no tree made yet: what runs is pristine already. (A local sandbox's
        # tree is a copy of the installed package, 700 MB for vLLM: made only once a patch needs it.)
        return
    try:
        tree = rt.sandbox.source_tree(c.framework, rt.run_dir)
    except Exception:
        if wanted:
            raise
        return
    patchtool.sync(tree, wanted)


def trial_env(rt: Runtime) -> TrialEnv:
    return TrialEnv(sandbox=rt.sandbox, run_dir=rt.run_dir, config=rt.config, hw=rt.hw, suite=rt.suite,
                    adapter=lambda fw: adapter(rt, fw), prepare=lambda c: _sync_tree(rt, c), progress=rt.progress)


# ---- nodes ---------------------------------------------------------------------------------
def setup(rt: Runtime, state: dict) -> dict:
    killed = reap_stale_servers(rt.run_dir)
    if killed:
        rt.ledger.event("reap", f"stopped server process groups left by a killed run: {killed}")
    rt.ledger.set_meta("status", "running")
    return {"route": "baseline"}


def baseline(rt: Runtime, state: dict) -> dict:
    trials = rt.ledger.trials()
    if any(t["status"] == "done" for t in trials):  # checkpoints lost after the baseline: plan on from the ledger
        return {"trial": None, "route": "propose"}
    open_ = [t for t in trials if t["phase"] == "framework"]
    if open_:  # re-run after a crash: the baseline trial is already recorded
        review_gate.gate(rt.ledger, rt.config, open_[0]["id"])
        return _route_for(rt, open_[0])
    p = rt.planner.propose(plan_context(rt, None))
    tid = rt.ledger.add_trial(phase=p.phase, kind=p.kind, description=p.description, rationale=p.rationale,
                              candidate=p.candidate.model_dump(mode="json"), incumbent_id=None,
                              proposal=p.model_dump(mode="json"))
    review_gate.gate(rt.ledger, rt.config, tid)
    return _route_for(rt, rt.ledger.trial(tid))


def propose(rt: Runtime, state: dict) -> dict:
    led, cfg = rt.ledger, rt.config
    inc = led.incumbent()
    pending = [t for t in led.trials() if t["status"] in ("proposed", "running")]
    if pending:  # a proposal recorded before a crash: finish it rather than plan twice
        return _route_for(rt, pending[0])
    if cfg.budget.trials is not None and led.launched_count() >= cfg.budget.trials:
        return {"route": "record", "stop_reason": f"trial budget of {cfg.budget.trials} used"}
    if cfg.budget.time_s is not None and rt.sandbox.elapsed_s() >= cfg.budget.time_s:
        return {"route": "record", "stop_reason": f"time budget of {cfg.budget.time_s:.0f} s used"}
    refused = _workload_refused(led.trials(), inc)
    if refused:
        return {"route": "record", "stop_reason": refused, "failed": "workload"}
    p: Proposal = rt.planner.propose(plan_context(rt, inc))
    if p.kind == "stop":
        return {"route": "record", "stop_reason": p.description}
    tid = led.atomic(lambda: _add_trial(rt, p, inc))  # its patch row and the trial, or neither
    review_gate.gate(led, cfg, tid)
    rt.progress(f"[{p.phase}] trial {tid}: {p.description}")
    return _route_for(rt, led.trial(tid))


def _add_trial(rt: Runtime, p: Proposal, inc: int | None) -> int:
    led = rt.ledger
    pid = None
    cand = p.candidate
    if p.kind == "patch":
        pid = f"p{len(led.patches()) + 1:02d}-{p.patch.fix}"
        log = ""
        if p.fixes_trial is not None:
            ft = led.trial(p.fixes_trial)
            log = ft["log_excerpt"]
            diag = next((d for d in ft["diagnoses"] if d.get("fatal", True)), {})
        else:
            diag = {}
        led.add_patch(pid=pid, key=p.patch.key, fix=p.patch.fix, framework=p.patch.framework,
                      diff=p.patch.diff, files=p.patch.files, diagnosis=diag, log_excerpt=log)
        cand = cand.model_copy(update={"patches": [*cand.patches, pid]})
        (rt.run_dir / "patches").mkdir(exist_ok=True)
        (rt.run_dir / "patches" / f"{pid}.diff").write_text(p.patch.diff)
    return led.add_trial(phase=p.phase, kind=p.kind, description=p.description, rationale=p.rationale,
                         candidate=cand.model_dump(mode="json"), incumbent_id=inc, proposal=p.model_dump(mode="json"),
                         patch_id=pid)


def _workload_refused(trials: list[dict], inc: int | None) -> str | None:
    """A baseline whose requests the server refused (HTTP 4xx) cannot be fixed by another
    configuration: the workload is the user's to change, so the run stops and says so. A later
    candidate refused the same way is that candidate's fault: it failed, the loop goes on."""
    if inc is not None:
        return None
    for t in trials:
        d = next((d for d in t["diagnoses"] if d["kind"] == "requests_refused"), None)
        status = (d or {}).get("details", {}).get("status")
        if d and status is not None and 400 <= status < 500:
            return (f"the server refused the workload's requests in baseline trial {t['id']} "
                    f"(HTTP {status}: {d['evidence'][0][:300]}); change measure.workload in --config")
    return None


def _route_for(rt: Runtime, t: dict) -> dict:
    """Where a recorded, unfinished trial goes next. Approval comes only from the ledger (a
    human at the CLI) or the run's --approve policy; never from anything a log or model said."""
    reviews = rt.ledger.trial_reviews(t["id"])  # its patch and its env/flag reviews (review_gate)
    if not reviews or t["status"] in ("running", "done"):
        return {"trial": t["id"], "route": "trial"}
    for p in reviews:
        if p["status"] == "pending" and rt.config.approve == "auto":
            rt.ledger.decide_patch(p["id"], "approved", by="policy:--approve auto")
        elif p["status"] == "pending" and rt.config.approve == "never":
            rt.ledger.decide_patch(p["id"], "skipped", by="policy:--approve never",
                                   reason="--approve never: patches and code-loading settings are not applied")
    reviews = rt.ledger.trial_reviews(t["id"])
    for p in reviews:
        if p["status"] in ("rejected", "skipped"):
            rt.ledger.finish_trial(t["id"], Result(
                verdict=p["status"], code=f"review_{p['status']}",
                reason=f"review {p['id']} {p['status']} by {p['decided_by']}: {p['reason'] or 'no reason given'}"))
            rt.progress(f"  review {p['id']} {p['status']} ({p['reason']})")
            return {"trial": None, "route": "propose"}
    pending = [p for p in reviews if p["status"] == "pending"]
    if pending:
        return {"trial": t["id"], "route": "review"}
    if t["kind"] == "patch":
        return {"trial": t["id"], "route": "apply"}
    return {"trial": t["id"], "route": "trial"}


def review(rt: Runtime, state: dict) -> dict:
    """The only place the run waits for a human. The answer is recorded by the caller (the CLI)
    in the ledger before resuming; here we only pause and then read it back."""
    t = rt.ledger.trial(state["trial"])
    pending = [p["id"] for p in rt.ledger.trial_reviews(t["id"]) if p["status"] == "pending"]
    interrupt({"trial": t["id"], "patch_id": pending[0] if pending else t["patch_id"]})
    return _route_for(rt, rt.ledger.trial(state["trial"]))


def apply(rt: Runtime, state: dict) -> dict:
    t = rt.ledger.trial(state["trial"])
    p = rt.ledger.patch(t["patch_id"])
    c = Candidate.model_validate(t["candidate"])
    try:
        tree = rt.sandbox.source_tree(c.framework, rt.run_dir)
        patchtool.check_diff(p["diff"], tree)
        _sync_tree(rt, c)
    except (patchtool.PatchRefused, NotImplementedError, OSError) as e:
        rt.ledger.start_trial(t["id"])
        rt.ledger.finish_trial(t["id"], Result(verdict="failed", code="patch_failed",
                                               reason=f"patch {p['id']} could not be applied: {e}"))
        return {"trial": None, "route": "propose"}
    commit = patchtool.applied(tree).get(p["id"])
    rt.ledger.event("patch", f"applied {p['id']} as commit {commit}")
    return {"trial": t["id"], "route": "trial"}


def trial(rt: Runtime, state: dict) -> dict:
    """Run the trial to its verdict (agent/trial.py); every step is in the ledger as it happens,
    so a re-run after a crash continues from what was measured."""
    led, tid = rt.ledger, state["trial"]
    t = led.trial_record(tid)
    if t.status == "done":
        return {"route": "decide"}
    led.start_trial(tid)
    inc = led.incumbent()
    tune = None
    if t.kind == "moe_tune" and not t.candidate.moe_configs:
        tune = partial(_tune_moe, rt, tid)
    result = run_trial(trial_env(rt), tid, t.candidate, led.trial_record(inc).candidate if inc is not None else None,
                       LedgerRecorder(led, tid, inc), tune=tune, check_moe=t.kind == "moe_tune")
    led.finish_trial(tid, result)
    return {"route": "decide"}


def _tune_moe(rt: Runtime, tid: int, c: Candidate) -> Candidate:
    rt.progress("  running the MoE tuner for the model's shard shapes ...")
    shape = moe.shard_shape(rt.card, c)
    configs = moe.tune(rt.sandbox, c, rt.run_dir, f"trial-{tid}")
    c = moe.install(c, configs, adapter(rt, c.framework))
    rt.ledger.update_trial(tid, candidate=c.model_dump(mode="json"))
    rt.ledger.save_ground()  # the tuner's time is spent for good: a resume does not tune again
    rt.ledger.event("moe", f"tuned {shape} -> {[p.name for p in configs]}")
    return c


def decide_node(rt: Runtime, state: dict) -> dict:
    """After a finished trial: leave the tree as the incumbent needs it and say where the run stands."""
    led, tid = rt.ledger, state["trial"]
    t = led.trial_record(tid)
    inc = led.incumbent()
    if t.verdict != "kept" and inc is not None:
        try:
            _sync_tree(rt, led.trial_record(inc).candidate)
        except Exception as e:  # noqa: BLE001
            led.event("patch", f"could not restore the tree after trial {tid}: {e}")
    best = None
    if inc is not None:
        ms = [m["data"] for m in led.measurements(inc, "candidate")]
        best = max(objective_value(m, rt.config.objective) for m in ms) if ms else None
    rt.progress(f"  -> {t.verdict}: {t.reason}" + (f"  | best {best:.1f}" if best is not None else ""))
    return {"trial": None, "route": "propose"}
