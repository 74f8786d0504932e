"""The built-in planner's MoE tuning, in memory (no sandbox), with trials side by side (--workers,
issue 18): the parallelism phase tunes each layout as it measures it; where a moe phase still has
layouts that lost on the fallback kernels, their retunes go out while the first tune is still
running, instead of a round later; once it lost, they are not proposed. One trial at a time, the
layouts are measured as they are and the moe phase tunes after."""
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


def _layouts(trials, inc, workers):
    return list(BuiltinPlanner().candidates(_ctx(trials, inc, workers), "parallel"))


def test_side_by_side_each_layout_is_tuned_as_it_is_measured_one_at_a_time_none_is():
    trials = [_trial(1, "flags", BASE, diagnoses=[FALLBACK])]
    one, four = _layouts(trials, 1, 1), _layouts(trials, 1, 4)
    assert one and all(p.kind == "config" and not p.candidate.moe_configs for p in one)
    assert all(p.kind == "moe_tune" and p.phase == "parallel" for p in four)
    # its own layout first (it runs fallback kernels too), then the very layouts one worker measures
    assert [p.candidate.parallel for p in four] == [BASE.parallel] + [p.candidate.parallel for p in one]
    no_warning = [_trial(1, "flags", BASE)]  # no fallback in its log: nothing to tune
    assert all(p.kind == "config" for p in _layouts(no_warning, 1, 4))


def test_after_a_tuned_layout_is_kept_the_others_are_tuned_for_their_own_shapes_and_none_twice():
    tp4 = BASE.model_copy(update={"parallel": Parallel(tp=4, dp=2), "moe_configs": ["/run/tp4/E=256.json"],
                                  "env": {"SGLANG_MOE_CONFIG_DIR": "/run/tp4"}})
    trials = [_trial(1, "flags", BASE, diagnoses=[FALLBACK]),
              _trial(2, "parallel", BASE, kind="moe_tune", verdict="reverted", inc=1),
              _trial(3, "parallel", tp4, kind="moe_tune", inc=1)]
    rest = _layouts(trials, 3, 4)
    assert rest and all(p.kind == "moe_tune" for p in rest)
    assert {(p.candidate.parallel.tp, p.candidate.parallel.ep) for p in rest}.isdisjoint({(8, False), (4, False)})
    # a config tuned for TP4 shards fits no other shape: each starts without it, and tunes its own
    assert all(not p.candidate.moe_configs and "SGLANG_MOE_CONFIG_DIR" not in p.candidate.env for p in rest)
    assert list(BuiltinPlanner().candidates(_ctx(trials, 3, 4), "moe")) == []  # no tune-then-retune rounds
