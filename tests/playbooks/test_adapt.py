"""Adapting the shipped playbook (and the sample) to every built-in model x hardware: a step either
applies with parameters that fit the model and node, or is skipped with a reason; never an error."""
from pathlib import Path

import pytest

from agent.playbooks import schema as pbm
from agent.playbooks.adapt import adapt
from tests.playbooks.samples import valid
from tools.hardware import NAMES as HW, get_hardware
from tools.models import BUILTIN_NAMES, get_model

SHIPPED = Path(__file__).resolve().parents[2] / "playbooks" / "glm-5.2-mi355x.yaml"


def playbooks():
    out = [pbm.parse(valid())]
    if SHIPPED.is_file():
        out.append(pbm.load(SHIPPED))
    return out


@pytest.mark.parametrize("hw", HW)
@pytest.mark.parametrize("model", BUILTIN_NAMES)
def test_every_step_adapts_or_is_skipped_with_a_reason(model, hw):
    card, prof = get_model(model), get_hardware(hw)
    for pb in playbooks():
        for s in pb.steps:
            a = adapt(s, card, prof, ("vllm", "sglang", "atom"))
            if a.skip:
                assert len(a.skip) > 10
                continue
            if a.parallel is not None:
                assert a.parallel.gpus <= prof.gpus_per_node and card.num_attention_heads % a.parallel.tp == 0
                assert not a.parallel.ep or card.is_moe
            for p in a.patches:
                if p["fix"] == "mtp_prefix_alias":
                    assert p["params"]["layer"] == card.num_hidden_layers and card.mtp_layers > 0
                if p["fix"] == "rocm_include_guard":
                    assert prof.vendor == "amd"
            if s.when.hw_compute:
                assert s.when.hw_compute in prof.tflops
            if s.kind == "moe_tune":
                assert card.is_moe


def test_the_mtp_layer_follows_the_card():
    s = pbm.parse(valid()).steps[3]
    assert adapt(s, get_model("glm-5.2"), get_hardware("mi355x")).patches[0]["params"] == {"layer": 78}
    assert adapt(s, get_model("deepseek-v3"), get_hardware("mi355x")).patches[0]["params"] == {"layer": 61}
    assert "no MTP" in adapt(s, get_model("qwen3-235b-a22b"), get_hardware("b200")).skip
    guard = pbm.parse(valid()).steps[4]
    assert adapt(guard, get_model("glm-4.5"), get_hardware("h200")).skip == "h200 is nvidia; the step is for amd only (ROCm)"
    mx = pbm.parse(valid()).steps[2]
    assert adapt(mx, get_model("glm-5.2"), get_hardware("mi300x")).skip == "mi300x has no native fp4 compute"
