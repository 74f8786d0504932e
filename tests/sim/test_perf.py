"""Pure functions of the performance model: each lever moves time the way physics says."""
import pytest

from sandboxes.sim.perf import (SimConfig, acceptance_length, efficiency, experts_touched, kv_capacity_tokens,
                                kv_bytes_per_token_per_gpu, step_time, weight_bytes_per_gpu)
from tools.hardware import get_hardware
from tools.models import get_model

M, HW = get_model("glm-5.2"), get_hardware("mi355x")


def cfg(**kw):
    base = dict(framework="sglang", weights="mxfp4", tp=4, dp=2, kv_dtype="fp8_e4m3", moe_tuned=True)
    base.update(kw)
    return SimConfig(**base)


def t(c, **kw):
    args = dict(n_decode=32, decode_ctx=20000)
    args.update(kw)
    return step_time(M, HW, c, efficiency(c.framework, HW.vendor), **args)


def test_experts_touched_saturates():
    assert experts_touched(256, 8, 1) == pytest.approx(8)
    assert experts_touched(256, 8, 10_000) == pytest.approx(256)
    assert experts_touched(256, 8, 10) < experts_touched(256, 8, 20)


def test_acceptance_length():
    assert acceptance_length(cfg()) == 1.0
    d3 = acceptance_length(cfg(spec="mtp", spec_steps=3, spec_draft_tokens=3))
    d5 = acceptance_length(cfg(spec="mtp", spec_steps=5, spec_draft_tokens=5))
    assert 2.0 < d3 < d5 < 6.0
    assert acceptance_length(cfg(spec="ngram", spec_steps=5, spec_draft_tokens=5)) < d3


def test_step_time_grows_with_batch_and_context_sublinearly():
    a, b = t(cfg(), n_decode=1).seconds, t(cfg(), n_decode=64).seconds
    assert a < b < 64 * a
    assert t(cfg(), decode_ctx=4000).seconds < t(cfg(), decode_ctx=40000).seconds


def test_levers():
    base = t(cfg()).seconds
    assert t(cfg(moe_tuned=False)).seconds > base  # fallback MoE kernel
    # A bf16 KV cache doubles what decode attention reads: slower where those reads bound it (GQA:
    # per-head keys and values). MLA's absorbed decode does ~240 FLOPs per latent byte, compute-bound
    # at the attention rate fitted for sglang on ROCm, so there the dtype moves the pool's size.
    qwen = get_model("qwen3-235b-a22b")
    kv = [step_time(qwen, HW, c, efficiency("sglang", HW.vendor), n_decode=32, decode_ctx=20000).seconds
          for c in (cfg(), cfg(kv_dtype="bf16"))]
    assert kv[1] > kv[0]
    assert kv_capacity_tokens(M, HW, cfg(kv_dtype="bf16")) < kv_capacity_tokens(M, HW, cfg())
    assert t(cfg(weights="fp8")).seconds > base  # twice the weight bytes
    assert t(cfg(ar_fusion=True)).seconds < base  # fused allreduce
    assert t(cfg(graphs=False)).seconds > base  # eager launches
    assert "allreduce" not in t(cfg(tp=1, dp=8)).parts
    assert t(cfg(spec="mtp", spec_steps=5, spec_draft_tokens=5)).parts["draft"] > 0


def test_kv_fp8_halves_kv_and_mla_is_replicated_across_tp():
    assert kv_bytes_per_token_per_gpu(M, cfg(kv_dtype="bf16")) > kv_bytes_per_token_per_gpu(M, cfg())
    assert kv_bytes_per_token_per_gpu(M, cfg(tp=8)) == kv_bytes_per_token_per_gpu(M, cfg(tp=4))
    q = get_model("qwen3-235b-a22b")
    assert kv_bytes_per_token_per_gpu(q, cfg(tp=4)) == q.kv_bytes_per_token("fp8_e4m3") / 4


def test_kv_capacity_follows_memory():
    assert kv_capacity_tokens(M, HW, cfg(tp=8)) > kv_capacity_tokens(M, HW, cfg(tp=4)) > 0
    assert kv_capacity_tokens(M, HW, cfg(tp=1)) < 0  # 418 GB of weights on one 288 GB GPU
    assert kv_capacity_tokens(M, HW, cfg(mem_fraction=0.95)) > kv_capacity_tokens(M, HW, cfg(mem_fraction=0.8))


def test_scheduler_levers():
    base = t(cfg(), n_decode=64).seconds
    assert t(cfg(graph_max_bs=32), n_decode=64).seconds > base  # batch above the captured graphs: eager
    assert t(cfg(overlap=True), n_decode=64).seconds < base
    assert t(cfg(decode_steps=4), n_decode=64).seconds < base
    assert kv_capacity_tokens(M, HW, cfg(graph_max_bs=1024)) < kv_capacity_tokens(M, HW, cfg(graph_max_bs=64))


def test_framework_flags_map_to_the_model(tmp_path):
    from sandboxes.sim import SimSandbox
    from tools.candidate import Candidate, Parallel
    sim = SimSandbox("glm-5.2", "mi355x")
    c = Candidate(framework="sglang", weights="mxfp4", parallel=Parallel(tp=8),
                  flags={"--speculative-algorithm": "NEXTN", "--speculative-num-steps": 3,
                         "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 7})
    sim.check_source = False
    s = sim.launch(c, tmp_path)
    cfgd = s.client.cfg
    assert (cfgd.spec, cfgd.spec_steps, cfgd.spec_draft_tokens, cfgd.max_running, cfgd.overlap) == ("mtp", 3, 3, 48, False)
    assert "Max running requests is reset to 48" in s.log_text() and "adjusted" in s.log_text()
    s = sim.launch(c.model_copy(update={"flags": {"--moe-runner-backend": "triton", "--max-running-requests": 128}}), tmp_path)
    assert s.client.cfg.max_running == 128 and s.client.cfg.overlap
    assert "Using default MoE kernel config" in s.log_text()  # triton JSON path instead of aiter


def test_dp_attention_splits_kv_inside_one_engine(tmp_path):
    from sandboxes.sim import SimSandbox
    from tools.candidate import Candidate, Parallel
    sim = SimSandbox("glm-5.2", "b200")
    c = Candidate(framework="sglang", weights="fp8", parallel=Parallel(tp=8, dp=2),
                  flags={"--enable-dp-attention": True, "--kv-cache-dtype": "fp8_e4m3"})
    s = sim.launch(c, tmp_path)  # one engine on 8 GPUs (not 2 x TP8, not 2 TP4 replicas that OOM)
    d = s.client.cfg
    assert (d.tp, d.dp, d.attn_dp) == (8, 1, 2)
    plain = SimConfig(**{**vars(d), "attn_dp": 1})
    hw = get_hardware("b200")
    assert kv_capacity_tokens(M, hw, d) > 1.8 * kv_capacity_tokens(M, hw, plain)
    eff = efficiency("sglang", "nvidia")
    assert step_time(M, hw, d, eff, n_decode=64, decode_ctx=20000).parts["attn"] < \
        step_time(M, hw, plain, eff, n_decode=64, decode_ctx=20000).parts["attn"]


@pytest.mark.parametrize("attn_dp", [1, 2])
def test_the_mtp_layers_kv_takes_pool_space_with_or_without_dp_attention(attn_dp):
    # With MTP drafting, each token also keeps KV in the draft layer(s), and the draft weights take
    # memory: capacity x (1 + mtp/L) = the capacity without drafting, less the draft weights' tokens.
    hw = get_hardware("b200")
    off = SimConfig(framework="sglang", weights="fp8", tp=8, kv_dtype="fp8_e4m3", attn_dp=attn_dp)
    on = SimConfig(**{**vars(off), "spec": "mtp", "spec_steps": 3})
    draft_tokens = M.mtp_params() * 2 / off.tp * attn_dp / kv_bytes_per_token_per_gpu(M, off)
    grow = 1 + M.mtp_layers / M.num_hidden_layers
    assert kv_capacity_tokens(M, hw, on) * grow == pytest.approx(kv_capacity_tokens(M, hw, off) - draft_tokens)


def test_vllm_takes_its_own_cpu_defaults_and_float32_costs_twice_the_bytes():
    # vLLM 0.32's server defaults (engine/arg_utils.py): 2048 batched tokens and 128 sequences per
    # rank on CPU, 8192 and 256 here on a GPU; a flag the user sets wins.
    from sandboxes.sim.frameworks import to_config
    from tools.candidate import Candidate
    small, cpu = get_model("smollm2-135m"), get_hardware("cpu")
    c = Candidate(framework="vllm", weights="bf16")
    d = to_config("vllm", {}, c, small, cpu).cfg
    assert (d.chunk, d.max_running, d.dtype) == (2048, 128, "auto")
    assert (to_config("vllm", {}, c, M, HW).cfg.chunk, to_config("vllm", {}, c, M, HW).cfg.max_running) == (8192, 256)
    d2 = to_config("vllm", {"--tensor-parallel-size": 2, "--max-num-seqs": 8}, c, small, cpu).cfg
    assert (d2.chunk, d2.max_running) == (4096, 8)
    # --dtype float32 upcasts the bf16 weights and the auto KV cache: the memory-bound decode step
    # streams twice the bytes, and prefill GEMMs run at the fp32 peak (half the bf16 one here).
    f = to_config("vllm", {"--dtype": "float32"}, c, small, cpu).cfg
    assert f.dtype == "float32"
    assert weight_bytes_per_gpu(small, f) == pytest.approx(2 * weight_bytes_per_gpu(small, d))
    assert kv_bytes_per_token_per_gpu(small, f) == pytest.approx(2 * kv_bytes_per_token_per_gpu(small, d))
    eff = efficiency("vllm", "cpu")
    assert step_time(small, cpu, f, eff, n_decode=1, decode_ctx=256).parts["dense"] == pytest.approx(
        2 * step_time(small, cpu, d, eff, n_decode=1, decode_ctx=256).parts["dense"])
    pre = dict(n_decode=0, decode_ctx=0, prefill_tokens=2048, prefill_ctx=1024, n_prefill_seqs=8)
    assert step_time(small, cpu, f, eff, **pre).seconds > 1.5 * step_time(small, cpu, d, eff, **pre).seconds
