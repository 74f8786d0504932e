"""The simulator's performance model: time of one engine step from a roofline of its bytes
and FLOPs on one GPU of a replica, plus launch gaps, scheduler overhead and TP all-reduces.

Pure functions of (model card, hardware profile, SimConfig, efficiency, batch contents), so
every configuration follows from the same physics; the only per-framework knobs are the
efficiencies in `EFFICIENCY` (how close a framework's kernels get to the hardware's peaks on
each vendor's software stack) — calibrated once against the story, never per configuration.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from sandboxes.sim import table
from tools.hardware import HardwareProfile
from tools.models import ModelCard, get_precision, kv_elem_bytes


@dataclass(frozen=True)
class Efficiency:
    bw: float  # achieved fraction of HBM bandwidth when streaming weights / KV
    gemm: float  # achieved fraction of peak TFLOP/s on dense GEMMs
    attn: float  # achieved fraction of bf16 peak in attention kernels
    moe_default: float  # MoE kernel speed with an untuned default config, relative to tuned
    layer_us: float  # launch gaps per layer per forward with graphs (kernel boundaries)
    eager_layer_us: float  # ... without graphs (eager mode)
    step_ms: float  # scheduler / sampling / host overhead per step
    req_us: float  # host overhead per running request per step (batch bookkeeping, sampling)
    ar_us: float  # latency of one all-reduce
    ar_fused_us: float  # ... fused with the residual RMSNorm (aiter allreduce fusion)
    frontend_tok_s: float  # tokenizer throughput of the (serial) front end, tokens/s
    mixed_prefill: bool = False  # prefill chunks share steps with decodes (vLLM/ATOM) or not (sglang)
    req_ms: float = 10.0  # per-request latency outside the engine (HTTP, tokenizer IPC): adds to TTFT
    moe_gemm: float | None = None  # achieved fraction of peak on routed experts' grouped GEMMs (None: as gemm)


# The rows are the calibration's output (sandboxes/sim/calibration.json, written by
# `python -m sandboxes.sim.calibrate` from ../shared/data/public-benchmarks and the story; the
# meaning and range of each fitted parameter are in sandboxes/sim/table.py). A version row
# (`sglang/amd/0.5.8`) is an older release on the same hardware.
def _rows() -> dict[str, Efficiency]:
    return {k: Efficiency(**v) for k, v in table.load()["rows"].items()}


def efficiency(framework: str, vendor: str, version: str | None = None) -> Efficiency:
    rows = _rows()
    if vendor == "cpu":  # one CPU build behaves like another: no graphs, no collectives
        return rows["cpu/cpu"]
    for key in ((f"{framework}/{vendor}/{version}",) if version else ()) + (f"{framework}/{vendor}", f"{framework}/amd"):
        if key in rows:
            return rows[key]
    return rows["cpu/cpu"]


@dataclass
class SimConfig:
    """A launch's configuration in framework-neutral terms (frameworks.py builds it from flags)."""
    framework: str
    weights: str = "bf16"
    tp: int = 1
    dp: int = 1
    ep: bool = False
    kv_dtype: str = "auto"
    spec: str | None = None  # mtp | eagle | eagle3 | ngram | None
    spec_steps: int = 0
    spec_topk: int = 1
    spec_draft_tokens: int = 0  # tokens verified per step (excluding the bonus token)
    ar_fusion: bool = False
    graphs: bool = True
    chunk: int = 8192  # prefill tokens per step
    max_running: int = 256
    mem_fraction: float = 0.88
    prefix_cache: bool = True
    graph_max_bs: int = 512  # decode batches above this run eagerly (no captured graph)
    overlap: bool = False  # host work of step i+1 overlaps the GPU work of step i
    decode_steps: int = 1  # decode steps per scheduling round (new requests wait for a round)
    conservativeness: float = 1.0  # KV reserved for running requests' future tokens, relative
    attn_dp: int = 1  # DP attention: attention (and its KV) split over this many ranks of the tp GPUs
    moe_tuned: bool = False
    # vLLM's --dtype float32 upcasts bf16 weights on load: weights, activations and an "auto" KV
    # cache are fp32 (twice the bytes) and GEMMs run at the fp32 peak.
    dtype: str = "auto"
    version: str | None = None  # an older framework release with its own calibrated row (None: current)
    notes: dict = field(default_factory=dict)

    @property
    def replicas(self) -> int:
        return self.dp

    @property
    def verify_tokens(self) -> int:
        return 1 + self.spec_draft_tokens if self.spec else 1


# Per-position acceptance of a chain draft relative to an MTP head trained with the model (whose
# own rate, on text and on random-token prompts, is fitted: table.GLOBAL_PARAMS); EAGLE3 heads
# trained apart accept a bit less; n-gram lookup hits only where the text repeats itself.
ACCEPT_REL = {"mtp": 1.0, "eagle": 1.0, "eagle3": 0.85, "ngram": 0.35}


def accept_p(spec: str, random_tokens: bool = False) -> float:
    g = table.load()["globals"]
    return ACCEPT_REL.get(spec, 0.6) * g["accept_random" if random_tokens else "accept_text"]


def _chain(cfg: SimConfig, random_tokens: bool) -> tuple[float, int]:
    """(per-position acceptance, draft depth), with a small gain from topk > 1 trees."""
    p = accept_p(cfg.spec, random_tokens)
    if cfg.spec_topk > 1:
        p = 1 - (1 - p) ** (1 + 0.35 * math.log2(cfg.spec_topk))
    return p, max(0, min(cfg.spec_steps, cfg.spec_draft_tokens))


def acceptance_length(cfg: SimConfig, random_tokens: bool = False) -> float:
    """Expected tokens emitted per verify step: 1 + sum of p^i over the draft chain."""
    if not cfg.spec:
        return 1.0
    p, depth = _chain(cfg, random_tokens)
    return (1 - p ** (depth + 1)) / (1 - p)


def acceptance_spread(cfg: SimConfig, random_tokens: bool = False) -> tuple[float, int]:
    """(standard deviation of the tokens one verify step emits, the most it can emit). A draft
    chain stops at its first rejection, so P(T >= j) = p^(j-1): requests of equal length finish
    at different steps, and a closed loop's equal-length requests do not stay in waves."""
    if not cfg.spec:
        return 0.0, 1
    p, depth = _chain(cfg, random_tokens)
    mean = sum(p ** (j - 1) for j in range(1, depth + 2))
    second = sum((2 * j - 1) * p ** (j - 1) for j in range(1, depth + 2))
    return math.sqrt(max(second - mean * mean, 0.0)), depth + 1


ROUTE_CORR = 0.3  # a draft token adds this fraction of an independent token's expert routing


def experts_touched(E: int, k: int, tokens: int) -> float:
    """Expected distinct experts hit when `tokens` tokens each route to k of E (uniform)."""
    if E == 0 or tokens <= 0:
        return 0.0
    return E * (1 - (1 - k / E) ** tokens)


def _attn_replica_bytes(m: ModelCard, cfg: SimConfig) -> float:
    """Extra attention weight bytes per GPU under DP attention (each rank keeps its own copy)."""
    if cfg.attn_dp <= 1:
        return 0.0
    return m.num_hidden_layers * m.attention_params() * get_precision(cfg.weights).bytes_per_weight * (cfg.attn_dp - 1) / cfg.tp


def _upcast(cfg: SimConfig) -> float:
    """Bytes of an fp32 value over the bytes the weights are stored in (1.0 unless --dtype float32)."""
    return 4.0 / get_precision(cfg.weights).bytes_per_weight if cfg.dtype == "float32" else 1.0


def _kv_elem(cfg: SimConfig) -> float:
    """Bytes of one KV cache element: an "auto" cache follows --dtype float32 to 4 bytes."""
    return 4.0 if cfg.dtype == "float32" and cfg.kv_dtype == "auto" else kv_elem_bytes(cfg.kv_dtype)


def weight_bytes_per_gpu(m: ModelCard, cfg: SimConfig) -> float:
    return m.weight_bytes(cfg.weights) * _upcast(cfg) / cfg.tp + _attn_replica_bytes(m, cfg)


def _kv_head_split(m: ModelCard, cfg: SimConfig) -> int:
    """GPUs one token's KV is split over: MLA's latent is shared by all heads, so every rank keeps
    all of it; GQA splits KV heads over the GPUs of one attention rank (tp / attn_dp)."""
    return 1 if m.is_mla else min(max(cfg.tp // cfg.attn_dp, 1), m.kv_heads)


def kv_bytes_per_token_per_gpu(m: ModelCard, cfg: SimConfig) -> float:
    b = m.kv_bytes_per_token(cfg.kv_dtype) * _kv_elem(cfg) / kv_elem_bytes(cfg.kv_dtype)
    if cfg.spec in ("mtp", "eagle", "eagle3") and m.mtp_layers:
        b *= 1 + m.mtp_layers / m.num_hidden_layers
    return b / _kv_head_split(m, cfg)


# DSA's lightning indexer: where the serving stack skips it when every key fits in the top-k (sglang's
# and ATOM's indexers return all positions for a context of index_topk or fewer; checked in sglang
# 0.5.8-0.5.23 dsa/nsa_indexer.py and ATOM 2026-08-22 sparse_attn_indexer, 2026-12-04).
INDEXER_SKIPS_SHORT = ("sglang", "atom")


def _attn_cost(m: ModelCard, ctx: float, tokens: float, kvb: float, prefill: bool = False,
               index_rate: float = 1.0, index_short: bool = False) -> tuple[float, float]:
    """(FLOPs, KV bytes) of attention for `tokens` query tokens over `ctx` keys, whole model, in
    bf16-peak FLOPs. MLA decodes in the absorbed form (scores against the latent) and prefills in
    the expanded multi-head form (per-head keys and values, fewer FLOPs per key). A DSA indexer
    scores in FP8 (FP8 queries and keys, FP32 accumulation, in sglang, vLLM and ATOM on both
    vendors), so its FLOPs count 1/index_rate (the chip's fp8/bf16 peak ratio); `index_short`: the
    stack skips it where the context fits in the top-k."""
    if m.is_mla:
        attended = min(ctx, m.index_topk) if m.index_topk else ctx
        if prefill:
            per_key = 2 * m.num_attention_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim)
        else:
            per_key = 2 * m.num_attention_heads * (2 * m.kv_lora_rank + m.qk_rope_head_dim)
        flops = tokens * attended * per_key
        kv = attended * (m.kv_lora_rank + m.qk_rope_head_dim) * kvb
        if m.index_n_heads and not (index_short and ctx <= m.index_topk):
            # DSA indexer scores every key, with its own small fp8 key cache
            flops += tokens * ctx * 2 * m.index_n_heads * m.index_head_dim / index_rate
            kv += ctx * m.index_head_dim
        return flops * m.num_hidden_layers, kv * m.num_hidden_layers
    per_key = 4 * m.num_attention_heads * m.hdim
    # Hybrid models: only the full-attention layers read a context-long KV (the others a bounded state).
    return (tokens * ctx * per_key * m.context_layers,
            ctx * 2 * m.kv_heads * m.hdim * kvb * m.context_layers)


@dataclass(frozen=True)
class StepCost:
    seconds: float
    parts: dict


def step_time(m: ModelCard, hw: HardwareProfile, cfg: SimConfig, eff: Efficiency, *,
              n_decode: int, decode_ctx: float, prefill_tokens: int = 0, prefill_ctx: float = 0.0,
              n_prefill_seqs: int = 0) -> StepCost:
    """Seconds for one forward step on one replica of cfg.tp GPUs: `n_decode` sequences at mean
    context `decode_ctx` each verifying cfg.verify_tokens tokens, plus `prefill_tokens` new prompt
    tokens whose mean context is `prefill_ctx`."""
    tp = cfg.tp
    prec = get_precision(cfg.weights)
    fp32 = cfg.dtype == "float32"
    bpw = prec.bytes_per_weight * _upcast(cfg)
    act = 4.0 if fp32 else 2.0  # bytes of one LM-head / activation value
    peak = hw.peak_tflops("fp32" if fp32 else prec.compute) * 1e12
    bw = hw.hbm_tb_s * 1e12 * eff.bw
    kvb = _kv_elem(cfg)
    v = cfg.verify_tokens
    T = n_decode * v + prefill_tokens
    parts: dict[str, float] = {}
    if T == 0:
        return StepCost(0.0, parts)
    # Dense part (attention projections, dense MLPs, shared experts, router) and the LM head.
    dense_b = m.nonrouted_params() * bpw / tp + m.vocab_size * m.hidden_size * act / tp + _attn_replica_bytes(m, cfg)
    dense_f = 2 * T * m.nonrouted_params() / tp + 2 * (n_decode * v + n_prefill_seqs) * m.vocab_size * m.hidden_size / tp
    parts["dense"] = max(dense_b / bw, dense_f / (peak * eff.gemm))
    # Routed experts: weights of every expert some token hits, FLOPs of top-k per token.
    if m.is_moe:
        # Draft tokens of one sequence route alike (consecutive tokens): count them as fewer
        # independent tokens when estimating how many experts the step touches.
        routed_tokens = n_decode * (1 + (v - 1) * ROUTE_CORR) + prefill_tokens
        touched = experts_touched(m.n_routed_experts, m.num_experts_per_tok, routed_tokens)
        moe_b = m.moe_layers * touched * m.expert_params() * bpw / tp
        moe_f = 2 * T * m.num_experts_per_tok * m.expert_params() * m.moe_layers / tp
        # Narrow per-shard expert GEMMs (small N) reach less of the peak: fixed per-expert work
        # (scales, routing, tile tails) is amortized over fewer columns. Normalized at N = 512.
        n_shard = m.moe_shapes(tp, tp if cfg.ep else 1).N
        shard_eff = (1 + 64 / 512) / (1 + 64 / n_shard)
        # Few experts per step cannot fill the GPU: their weights stream at a fraction of the
        # saturated rate (measured, table.MOE_HALF_EXPERTS). Under EP a GPU holds 1/tp of them.
        per_gpu = touched / (tp if cfg.ep else 1)
        occupancy = per_gpu / (per_gpu + table.MOE_HALF_EXPERTS)
        t = max(moe_b / (bw * occupancy), moe_f / (peak * (eff.moe_gemm or eff.gemm))) / shard_eff
        parts["moe"] = t if cfg.moe_tuned else t / eff.moe_default
    # Attention: KV reads of decodes (replicated per rank for MLA), FLOPs split over heads.
    attn_peak = hw.peak_tflops("fp32" if fp32 else "bf16") * 1e12 * eff.attn
    # Under DP attention each rank reads only its own requests' KV.
    kv_split = _kv_head_split(m, cfg) * cfg.attn_dp
    idx = {"index_rate": 1.0 if fp32 else hw.peak_tflops("fp8") / hw.peak_tflops("bf16"),
           "index_short": cfg.framework in INDEXER_SKIPS_SHORT}
    f_d, b_d = _attn_cost(m, decode_ctx, v, kvb, **idx)
    f_p, b_p = _attn_cost(m, prefill_ctx, prefill_tokens, kvb, prefill=True, **idx) if prefill_tokens else (0.0, 0.0)
    parts["attn"] = (max(n_decode * b_d / kv_split / bw, n_decode * f_d / tp / attn_peak)
                     + max(b_p / kv_split / bw, f_p / tp / attn_peak))
    # Launch gaps: graphs only capture decode batches; prefill always runs eagerly.
    graphed = cfg.graphs and not prefill_tokens and n_decode <= cfg.graph_max_bs
    layer_us = eff.layer_us if graphed else eff.eager_layer_us
    parts["launch"] = m.num_hidden_layers * layer_us * 1e-6
    # Two all-reduces per layer (after attention and after the MLP), ring over the TP group.
    if tp > 1:
        # Small messages go one-shot: every rank exchanges flags and data with each peer, so the
        # latency grows with the number of peers (calibrated at 4 ranks = 3 peers).
        lat = (eff.ar_fused_us if cfg.ar_fusion else eff.ar_us) * 1e-6 * (tp - 1) / 3
        msg = T * m.hidden_size * 2
        ring = 2 * (tp - 1) / tp * msg / (hw.scaleup_gb_s * 1e9)
        parts["allreduce"] = 2 * m.num_hidden_layers * (lat + ring)
    # Speculative drafting: spec_steps forwards of the one-layer MTP module (or draft head).
    if cfg.spec and n_decode and cfg.spec_steps:
        parts["draft"] = cfg.spec_steps * _draft_step(m, hw, cfg, eff, n_decode, decode_ctx, bw, peak)
    host = eff.step_ms * 1e-3 + (n_decode + n_prefill_seqs) * eff.req_us * 1e-6
    # The overlap scheduler hides most host work behind the previous step's kernels; several
    # decode steps per round pay the scheduling part once.
    parts["sched"] = host * (0.35 if cfg.overlap else 1.0) / (max(cfg.decode_steps, 1) if not prefill_tokens else 1)
    return StepCost(sum(parts.values()), parts)


def _draft_step(m: ModelCard, hw: HardwareProfile, cfg: SimConfig, eff: Efficiency, n: int,
                ctx: float, bw: float, peak: float) -> float:
    """One draft forward for n sequences: one decoder layer (bf16: MTP layers are excluded from
    quantization) plus the LM head; n-gram drafting costs only host time."""
    if cfg.spec == "ngram":
        return 0.2e-3
    tp = cfg.tp
    layer_params = m.mtp_params() / max(m.mtp_layers, 1) if m.mtp_layers else m.attention_params() + m.dense_mlp_params()
    touched = experts_touched(m.n_routed_experts, m.num_experts_per_tok, n * cfg.spec_topk) if m.is_moe else 0
    active = layer_params - (m.n_routed_experts - touched) * m.expert_params() if m.is_moe else layer_params
    b = (active * 2 + m.vocab_size * m.hidden_size * 2) / tp
    f = 2 * n * cfg.spec_topk * (m.attention_params() + m.vocab_size * m.hidden_size) / tp
    launch = (eff.layer_us if cfg.graphs else eff.eager_layer_us) * 1e-6
    return max(b / bw, f / (peak * eff.gemm)) + launch


def kv_capacity_tokens(m: ModelCard, hw: HardwareProfile, cfg: SimConfig) -> float:
    """Tokens the KV pool of one replica holds: the memory fraction the framework may use, less
    weights (and draft weights), less an activation reserve, over KV bytes per token per GPU."""
    usable = hw.hbm_gb * 1e9 * cfg.mem_fraction
    draft = m.mtp_params() * 2 / cfg.tp if cfg.spec in ("mtp", "eagle", "eagle3") else 0.0
    # workspace, captured graphs (~4 MB per batch size), chunk activations
    reserve = 4e9 + (cfg.graph_max_bs * 4e6 if cfg.graphs else 0) + min(cfg.chunk, 65536) * m.hidden_size * 2 * 8
    free = usable - weight_bytes_per_gpu(m, cfg) - draft - reserve
    # Under DP attention the ranks hold different requests' KV: the pool is attn_dp times larger.
    return free * cfg.attn_dp / kv_bytes_per_token_per_gpu(m, cfg)


def frontend_s(tokens: int, eff: Efficiency) -> float:
    """Tokenization in the serial front end (the per-request latency, eff.req_ms, is not serial)."""
    return tokens / eff.frontend_tok_s
