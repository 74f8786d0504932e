import json

import pytest

from agent.errors import BadInput
from tools.models import BUILTIN_NAMES, PRECISIONS, from_hf_config, get_model


def test_glm52_totals_match_the_card():
    m = get_model("glm-5.2")
    assert m.total_params == pytest.approx(744e9, rel=0.01)
    assert m.active_params == pytest.approx(40e9, rel=0.06)
    assert m.num_hidden_layers == 78 and m.mtp_layers == 1 and m.is_moe and m.is_mla
    assert m.architecture == "GlmMoeDsaForCausalLM"


def test_deepseek_totals_match_the_card():
    m = get_model("deepseek-v3")
    assert m.total_params == pytest.approx(671e9, rel=0.01)
    assert m.active_params == pytest.approx(37e9, rel=0.03)


@pytest.mark.parametrize("name,total,active", [("qwen3-235b-a22b", 235e9, 22e9), ("glm-4.5", 355e9, 32e9),
                                               ("smollm2-135m", 135e6, 135e6)])
def test_other_cards(name, total, active):
    m = get_model(name)
    assert m.total_params == pytest.approx(total, rel=0.02)
    assert m.active_params == pytest.approx(active, rel=0.06)


def test_mxfp4_counts_its_e8m0_scales():
    assert PRECISIONS["mxfp4"].bytes_per_weight == 0.5 + 1 / 32
    m = get_model("glm-5.2")
    assert m.weight_bytes("mxfp4") < m.weight_bytes("fp8") < m.weight_bytes("bf16")


def test_mla_kv_bytes_are_latent_plus_rope_per_layer():
    m = get_model("deepseek-v3")
    assert m.kv_bytes_per_token("bf16") == (512 + 64) * 2 * 61
    assert m.kv_bytes_per_token("fp8_e4m3") == (512 + 64) * 61
    s = get_model("smollm2-135m")
    assert s.kv_bytes_per_token("auto") == 2 * 3 * 64 * 2 * 30


def test_moe_shapes_per_tp_and_ep():
    m = get_model("glm-5.2")
    s = m.moe_shapes(tp=4)
    assert (s.E, s.N, s.K, s.topk) == (256, 512, 6144, 8)
    s = m.moe_shapes(tp=8, ep=8)
    assert (s.E, s.N) == (32, 2048)
    with pytest.raises(BadInput):
        get_model("smollm2-135m").moe_shapes(1)


def test_unknown_model_names_the_builtins():
    with pytest.raises(BadInput) as e:
        get_model("gpt-9")
    assert "gpt-9" in str(e.value) and all(n in str(e.value) for n in BUILTIN_NAMES)


def test_from_hf_config(tmp_path):
    cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 4096,
           "num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
           "intermediate_size": 12288, "vocab_size": 151936, "num_experts": 128, "num_experts_per_tok": 8,
           "moe_intermediate_size": 1536}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    m = get_model(str(tmp_path))
    assert m.total_params == get_model("qwen3-235b-a22b").total_params
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(BadInput):
        from_hf_config(tmp_path / "bad.json")


@pytest.mark.parametrize("qc, want", [
    (None, "bf16"),
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8"),  # DeepSeek-V3's own
    ({"quant_method": "quark", "global_quant_config": {"weight": {"dtype": "fp4", "qscheme": "per_group"}}}, "mxfp4"),
    ({"quant_method": "mxfp4"}, "mxfp4"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "nvfp4"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}, "fp8"),
    ({"quant_method": "awq", "bits": 4}, None),  # a precision inferloop does not search: not known
])
def test_a_checkpoint_s_precision_is_read_from_its_quantization_config(tmp_path, qc, want):
    from tools.models import checkpoint_precision
    cfg = {"torch_dtype": "bfloat16", **({"quantization_config": qc} if qc else {})}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert checkpoint_precision(tmp_path) == want
    assert checkpoint_precision(tmp_path / "absent") is None
