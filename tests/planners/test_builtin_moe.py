"""The built-in planner's MoE phase, in memory (no sandbox): with trials side by side (--workers)
the retunes of the layouts that lost on the fallback kernels go out while the first tune is still
running, instead of a round later; once it lost, they are not proposed (issue 18)."""
from agent.config import RunConfig, Target
from agent.planners.base import PlanContext
from agent.planners.builtin import BuiltinPlanner
from tools.candidate import Candidate, Parallel
from tools.hardware import get_hardware
from tools.models import get_model

FALLBACK = {"kind": "moe_default_config", "message": "MoE kernel uses a default config", "fatal": False,
            "evidence": ["Using default MoE kernel config. Performance might be sub-optimal!"]}


def _trial(tid, phase, cand, *, kind="config", verdict="kept", status="done", diagnoses=(), inc=None):
    return {"id": tid, "phase": phase, "kind": kind, "candidate": cand.model_dump(mode="json"), "incumbent_id": inc,
            "proposal": {}, "rationale": "", "outcome": "launched", "verdict": verdict, "status": status,
            "diagnoses": list(diagnoses), "reason": "", "reason_code": None}


def _ctx(trials, inc, workers):
    cfg = RunConfig(target=Target(model="glm-5.2", hw="mi355x"), workers=workers)
    return PlanContext(config=cfg, card=get_model("glm-5.2"), hw=get_hardware("mi355x"), trials=trials,
                       measurements=lambda i: [{"role": "candidate", "data": {"knee_tok_s": 100.0 + i}}],
                       incumbent_id=inc, frameworks=("sglang",), source_tree=lambda fw: None)


BASE = Candidate(framework="sglang", weights="mxfp4", parallel=Parallel(tp=8))


def _moe_phase(tune_status, tune_verdict, workers=4):
    tp4 = BASE.model_copy(update={"parallel": Parallel(tp=4, dp=2)})
    trials = [_trial(1, "flags", BASE, diagnoses=[FALLBACK]),
              _trial(2, "parallel", tp4, verdict="reverted", diagnoses=[FALLBACK], inc=1),
              _trial(3, "moe", BASE, kind="moe_tune", status=tune_status, verdict=tune_verdict, inc=1)]
    return list(BuiltinPlanner().candidates(_ctx(trials, 1, workers), "moe"))


def test_the_retunes_go_out_while_the_first_tune_runs_and_not_after_it_lost():
    running = _moe_phase("running", None)
    assert [(p.kind, p.candidate.parallel) for p in running] == [("moe_tune", Parallel(tp=4, dp=2))]
    assert _moe_phase("done", "reverted") == []  # the tune lost: nothing says tuning pays here
