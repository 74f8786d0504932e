"""The built-in planner's precision phase: which frameworks it tries each checkpoint on."""
from dataclasses import replace

from agent.planners.builtin import BuiltinPlanner
from tests.planners.conftest import make_ctx, trial
from tools.candidate import Candidate, Parallel


def _on(ctx) -> list[tuple[str, str]]:
    return [(p.candidate.weights, p.candidate.framework) for p in BuiltinPlanner().candidates(ctx, "precision")]


def test_a_framework_whose_trial_is_still_out_is_tried_like_one_that_served_the_model(tmp_path):
    # a parallel run asks for the precision phase while the framework phase's trials are out (their
    # nodes busy, the others idle): the checkpoints go out on every framework in the order one trial
    # at a time proposes them once those trials are back, not on the baseline's framework alone
    def fw(tid, name, verdict=None, **kw):
        t = trial(tid, "framework", Candidate(framework=name, weights="bf16", parallel=Parallel(tp=8)), verdict, **kw)
        return t if verdict else {**t, "status": "running", "outcome": None}
    ctx = make_ctx(tmp_path)
    out = replace(ctx, trials=[fw(1, "vllm"), fw(2, "sglang"), fw(3, "atom", "failed", outcome="launch_failed")],
                  incumbent_id=1)
    assert _on(out)[:2] == [("mxfp4", "vllm"), ("mxfp4", "sglang")]
    assert {f for _, f in _on(out)} == {"vllm", "sglang"}  # atom did not launch the model
    back = replace(out, trials=[fw(1, "vllm", "kept"), {**fw(2, "sglang", "reverted"), "reason_code": "eval_regression"},
                                out.trials[2]])
    assert {f for _, f in _on(back)} == {"vllm"}  # back, and failed its evals: not tried again
    assert _on(replace(back, trials=[*back.trials[:1], fw(2, "sglang", "reverted"), back.trials[2]])) == _on(out)
