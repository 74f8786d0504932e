"""The built-in planner's scope: the phases a ground lets it walk and the GPUs of its baseline."""
import pytest

from agent.planners.builtin import BuiltinPlanner
from tools.errors import BadInput
from tests.planners.conftest import make_ctx


OUTSIDE = ("precision", "speculative", "parallel", "moe")


def test_phases_outside_the_scope_propose_nothing(tmp_path):
    ctx = make_ctx(tmp_path)
    assert any(list(BuiltinPlanner().candidates(ctx, ph)) for ph in OUTSIDE)  # the full planner has some
    p = BuiltinPlanner(phases=("flags", "framework"))
    assert p.phases == ("framework", "flags")  # walked in the story's order, whatever order given
    assert [list(p.candidates(ctx, ph)) for ph in OUTSIDE] == [[]] * len(OUTSIDE)


def test_bad_scope_names_the_value():
    with pytest.raises(BadInput, match=r"unknown planner phase 'kernels'; allowed: "):
        BuiltinPlanner(phases=("flags", "kernels"))
    with pytest.raises(BadInput, match="gpus must be >= 1, got 0"):
        BuiltinPlanner(gpus=0)


def test_a_node_with_one_checkpoint_starts_at_its_precision_and_proposes_no_other(tmp_path):
    # a real node serves the checkpoint it was given (agent/run.py puts the sandbox's weights in the
    # scope): another precision would be measured on that checkpoint under the other's name
    from dataclasses import replace
    from tests.planners.conftest import trial
    from tools.candidate import Candidate, Parallel
    ctx = make_ctx(tmp_path)
    bf16 = Candidate(framework="sglang", weights="bf16", parallel=Parallel(tp=8))
    ctx = replace(ctx, trials=[trial(1, "framework", bf16, "kept")])
    names = lambda p: sorted({x.candidate.weights for x in p.candidates(ctx, "precision")})
    assert names(BuiltinPlanner()) == ["fp8", "mxfp4", "nvfp4"]  # the sim's node: every checkpoint
    assert names(BuiltinPlanner(weights=("bf16",))) == []
    assert names(BuiltinPlanner(weights=("bf16", "fp8"))) == ["fp8"]
    start = BuiltinPlanner(weights=("fp8",)).propose(replace(ctx, trials=[]))
    assert start.candidate.weights == "fp8" and "fp8" in start.description
    with pytest.raises(BadInput, match="unknown weight precision 'int4'"):
        BuiltinPlanner(weights=("int4",))
