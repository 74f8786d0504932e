"""measure.harness in --config: who scores the gate (the project's tasks, or lm-eval), checked
at the boundary with the allowed values named."""
import pytest

from agent.config import Measure, RunConfig, Target
from agent.errors import BadInput


def cfg(**kw):
    return RunConfig(**{"target": Target(model="glm-5.2", hw="mi355x"), **kw})


def test_unknown_harness_names_the_allowed_ones():
    with pytest.raises(BadInput, match="inferloop, lm-eval"):
        cfg(measure=Measure(harness="helm")).check()


def test_lm_eval_needs_a_server_over_http_not_the_sim():
    with pytest.raises(BadInput, match="backend local or docker"):
        cfg(measure=Measure(harness="lm-eval")).check()


def test_lm_eval_task_names_are_lm_evals_not_the_projects(tmp_path):
    m = Measure(harness="lm-eval", eval_tasks=["gpqa_diamond_zeroshot"])
    with pytest.raises(BadInput, match="eval task"):
        cfg(measure=Measure(eval_tasks=["gpqa_diamond_zeroshot"])).check()
    c = cfg(backend="local", measure=m, target=Target(model="glm-5.2", hw="mi355x", model_path=str(tmp_path)))
    assert c.check().measure.eval_tasks == ["gpqa_diamond_zeroshot"]
