"""`agent optimize --planner builtin|llm|hybrid [--llm-model M]`: bad choices exit 2 with one clear line."""

import pytest

from agent.config import RunConfig, Target
from agent.planners.builtin import BuiltinPlanner
from agent.planners.hybrid import HybridPlanner, make_planner
from agent.planners.llm import LLMPlanner


@pytest.mark.parametrize("extra,words", [
    (["--planner", "oracle"], "unknown planner 'oracle'; allowed: builtin, hybrid, llm"),
    (["--planner", "hybrid"], "--planner hybrid needs --llm-model NAME"),
    (["--planner", "llm"], "--planner llm needs --llm-model NAME"),
])
def test_bad_planner_choice_exits_2(agent, tmp_path, extra, words):
    r = agent("optimize", "--model", "glm-5.2", "--hw", "mi355x", "--run-dir", str(tmp_path / "r"), *extra)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert words in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "r" / "ledger.sqlite").exists()


def test_help_names_the_planners(agent):
    r = agent("optimize", "--help")
    assert r.returncode == 0 and "--planner" in r.stdout and "--llm-model" in r.stdout


def test_the_config_round_trips_the_choice_and_builds_the_planner():
    cfg = RunConfig(target=Target(model="glm-5.2", hw="mi355x"), planner="hybrid", llm_model="qwen3").check()
    back = RunConfig.model_validate(cfg.model_dump(mode="json"))  # what a resumed run reads from the ledger
    assert (back.planner, back.llm_model) == ("hybrid", "qwen3")
    assert isinstance(make_planner("builtin"), BuiltinPlanner)
    assert isinstance(make_planner("llm", llm_model="m", api_key="k"), LLMPlanner)
    h = make_planner("hybrid", llm_model="m", api_key="sk-distinct-123")
    assert isinstance(h, HybridPlanner) and "sk-distinct-123" not in repr(h.llm)
