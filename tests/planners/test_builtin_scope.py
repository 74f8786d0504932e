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
