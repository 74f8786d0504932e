"""How close a measured configuration comes to the hardware's ceilings: the share of the roofline.

Decode is memory-bound: each step reads the weights it touches and every running sequence's KV
cache, so bytes moved per step over the measured time per output token (TPOT) is the bandwidth it
achieved, against the replica's HBM bandwidth. Prefill is compute-bound: the FLOPs of one prompt
over its time to first token at the lightest load (no queue), against the replica's peak for the
weights' compute dtype. Pure functions of a model card, a hardware profile, a candidate and sweep
points (tools.bench.metrics.SweepPoint as JSON), so the report and the tests compute the same.
"""
from __future__ import annotations

from pydantic import BaseModel

from tools.models import KV_DTYPE_BYTES, ModelCard, get_precision


class Share(BaseModel):
    achieved: float  # bytes/s (decode) or FLOP/s (prefill), per replica
    peak: float
    share: float  # achieved / peak
    detail: str  # what was counted, for the report


class Roofline(BaseModel):
    decode: Share | None = None
    prefill: Share | None = None


def experts_touched(experts: int, topk: int, tokens: float) -> float:
    """Expected distinct experts a decode step reads when `tokens` tokens each route to `topk` of
    `experts` (uniform routing): E * (1 - (1 - k/E)^B). One token reads k; a large batch reads all."""
    if experts <= 0 or topk <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - topk / experts) ** max(tokens, 1.0))


def decode_bytes_per_step(card: ModelCard, weights: str, kv_dtype: str, batch: float, context: float) -> float:
    """Bytes one decode step of one replica reads: the weights it touches (attention, dense MLPs,
    shared experts, router and lm_head in full; routed experts as experts_touched says) plus the KV
    cache of `batch` sequences of `context` tokens."""
    bpw = get_precision(weights).bytes_per_weight
    lm_head = card.vocab_size * card.hidden_size * 2.0  # stays bf16 (on the quantizers' exclude list)
    routed = card.moe_layers * experts_touched(card.n_routed_experts, card.num_experts_per_tok, batch) \
        * card.expert_params()
    kv = batch * context * card.kv_bytes_per_token(kv_dtype)
    return (card.nonrouted_params() + routed) * bpw + lm_head + kv


def prefill_flops(card: ModelCard, new_tokens: float, cached_tokens: float = 0.0) -> float:
    """FLOPs to prefill one prompt: 2 per active weight per new token, plus attention's QK^T and
    PV over the causal context (each new token attends to the cached prefix and to half the new ones)."""
    attn_width = card.num_attention_heads * card.hdim
    attn = 4.0 * card.num_hidden_layers * new_tokens * (cached_tokens + new_tokens / 2) * attn_width
    return 2.0 * card.active_params * new_tokens + attn


def _kv_dtype(flags: dict) -> str:
    v = str(flags.get("--kv-cache-dtype", "auto"))
    return v if v in KV_DTYPE_BYTES else "auto"  # a name we do not know: count it as 16-bit


def share(card: ModelCard, hw, candidate: dict, sweep: list[dict], workload: dict,
          knee_rps: float | None = None) -> Roofline:
    """The roofline shares of one measured configuration. Decode at the knee (or the busiest
    successful point), prefill at the lightest offered load."""
    par = candidate.get("parallel") or {}
    tp, dp = int(par.get("tp", 1) or 1), int(par.get("dp", 1) or 1)
    ok = [p for p in sweep if p.get("success", 0) > 0]
    out = Roofline()
    if not ok:
        return out
    inp, outp = float(workload.get("input_len", 0)), float(workload.get("output_len", 0))
    hit = float(workload.get("prefix_hit", 0.0))
    at = [p for p in ok if knee_rps is not None and abs(p["rps"] - knee_rps) < 1e-9] or \
        sorted(ok, key=lambda p: p["rps"])[-1:]
    p = at[0]
    if p.get("tpot_p50_s"):
        batch = max(p["concurrency"] / dp, 1.0)
        per_step = decode_bytes_per_step(card, candidate["weights"], _kv_dtype(candidate.get("flags") or {}),
                                         batch, inp + outp / 2)
        bw = per_step / p["tpot_p50_s"]
        peak = hw.hbm_tb_s * 1e12 * tp
        out.decode = Share(achieved=bw, peak=peak, share=bw / peak,
                           detail=f"{per_step / 1e9:.2f} GB per step at batch {batch:.1f} / TPOT "
                                  f"{p['tpot_p50_s'] * 1e3:.1f} ms vs {hw.hbm_tb_s * tp:g} TB/s HBM")
    light = sorted(ok, key=lambda p: p.get("offered_rps") or p["rps"])[0]
    if light.get("ttft_p50_s") and inp:
        fl = prefill_flops(card, inp * (1 - hit), inp * hit)
        compute = get_precision(candidate["weights"]).compute
        peak = hw.peak_tflops(compute) * 1e12 * tp
        ach = fl / light["ttft_p50_s"]
        out.prefill = Share(achieved=ach, peak=peak, share=ach / peak,
                            detail=f"{fl / 1e12:.1f} TFLOP per prompt / TTFT p50 {light['ttft_p50_s']:.2f} s "
                                   f"vs {peak / 1e12:,.0f} TFLOP/s peak for {compute} GEMMs")
    return out
