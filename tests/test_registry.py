"""The ground registry: backends opened by name, each ground registering itself."""
from types import SimpleNamespace

import pytest

from sandboxes import registry
from tools.errors import BadInput


def cfg(backend="sim", model_path=None, **target):
    t = SimpleNamespace(model=target.get("model", "glm-5.2"), hw=target.get("hw", "mi355x"),
                        model_path=model_path, python=None)
    w = SimpleNamespace(input_len=256, output_len=32)
    return SimpleNamespace(backend=backend, target=t, seed=3, measure=SimpleNamespace(workload=w))


def test_built_in_grounds_register_themselves():
    assert registry.names() == ("docker", "local", "sim")
    assert registry.get("sim").open.__module__ == "sandboxes.sim.ground"
    assert registry.get("local").open.__module__ == "sandboxes.local"
    assert registry.get("docker").open.__module__ == "sandboxes.docker"


def test_framework_picks_a_ground_that_serves_it_its_own_way():
    assert registry.get("local", "transformers").open.__module__ == "sandboxes.transformers_serve"
    with pytest.raises(BadInput, match=r"--framework vllm: no local ground serves it on its own; allowed with "
                                       r"--backend local: transformers"):
        registry.get("local", "vllm")


def test_unknown_backend_names_the_value_and_the_allowed_ones():
    with pytest.raises(BadInput, match=r"unknown backend 'k8s'; allowed: docker, local, sim"):
        registry.get("k8s")


def test_sim_opens_a_sim_sandbox_with_the_run_seed():
    sb = registry.open_sandbox("sim", cfg(), None, None)
    assert (sb.name, sb.seed) == ("sim", 3)


def test_local_grounds_need_a_model_path():
    with pytest.raises(BadInput, match="--backend local needs --model-path"):
        registry.open_sandbox("local", cfg("local"), None, None)
    with pytest.raises(BadInput, match="--framework transformers needs --model-path"):
        registry.open_sandbox("local", cfg("local"), None, None, framework="transformers")
    c = cfg("local")
    c.target.model_path, c.target.checkpoints = "/m/glm", {"fp8": "/m/glm-fp8"}
    with pytest.raises(BadInput, match="needs --model-path DIR, one checkpoint"):
        registry.open_sandbox("local", c, None, None, framework="transformers")


def test_transformers_ground_warms_up_with_the_runs_workload(tmp_path):
    sb = registry.open_sandbox("local", cfg("local", model_path=str(tmp_path)), None, None, framework="transformers")
    assert sb.frameworks == ("transformers",) and sb.device == "cuda"
    assert (sb.warmup.input_len, sb.warmup.output_len) == (256, 32)


def test_a_new_ground_plugs_in_and_adds_its_commands():
    seen: list = []
    g = registry.Ground("fake", lambda c, card, hw: ("opened", c.seed), commands=seen.append)
    registry.register(g)
    try:
        assert "fake" in registry.names()
        assert registry.open_sandbox("fake", cfg("fake"), None, None) == ("opened", 3)
        assert registry.commands()[-1] == seen.append  # the CLI calls each hook with its app

    finally:
        del registry._GROUNDS[("fake", None)]


def test_the_sim_adds_agent_estimate(agent):
    r = agent("estimate", "--help")
    assert r.returncode == 0 and "simulated node" in r.stdout
