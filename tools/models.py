"""Model cards: the shapes of a model, from a built-in card or a local HF `config.json`.

Everything the simulator, the MoE tuner and the loop need is derived from these few HF
config fields (parameter counts, bytes per precision, KV bytes per token, MoE GEMM shapes),
so a model that is not built in works the same way from its `config.json`.
"""
from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from tools.errors import BadInput, unknown


class Precision(BaseModel):
    """Storage of one weight value. MXFP4: 4-bit e2m1 values plus one e8m0 (1-byte) scale per
    32 values (OCP MX spec), so 0.5 + 1/32 bytes per weight. FP8: e4m3 plus a 4-byte scale per
    128x128 block (DeepSeek-style block quantization)."""
    model_config = ConfigDict(frozen=True)
    name: str
    value_bytes: float
    scale_bytes: float = 0.0
    group: int = 1  # values sharing one scale
    compute: str = "bf16"  # tensor-core dtype its GEMMs run in on hardware that has it

    @property
    def bytes_per_weight(self) -> float:
        return self.value_bytes + (self.scale_bytes / self.group if self.group else 0.0)


PRECISIONS: dict[str, Precision] = {
    "bf16": Precision(name="bf16", value_bytes=2.0),
    "fp8": Precision(name="fp8", value_bytes=1.0, scale_bytes=4.0, group=128 * 128, compute="fp8"),
    "mxfp4": Precision(name="mxfp4", value_bytes=0.5, scale_bytes=1.0, group=32, compute="fp4"),
    # NVFP4 (NVIDIA ModelOpt): e2m1 values plus one e4m3 (1-byte) scale per 16 values and a
    # per-tensor fp32 scale (negligible), so 0.5 + 1/16 bytes per weight; runs on FP4 tensor cores.
    "nvfp4": Precision(name="nvfp4", value_bytes=0.5, scale_bytes=1.0, group=16, compute="fp4"),
}

# KV cache element sizes by the names the frameworks use for --kv-cache-dtype.
KV_DTYPE_BYTES = {"auto": 2.0, "bf16": 2.0, "fp16": 2.0, "float16": 2.0, "bfloat16": 2.0,
                  "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "fp8_inc": 1.0}


class MoeShape(BaseModel):
    """One MoE layer's expert GEMMs as a tuner sees them on one shard (vLLM/sglang naming:
    E experts on this shard, N = per-shard intermediate size, K = hidden size)."""
    E: int
    N: int
    K: int
    topk: int


class ModelCard(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    architecture: str
    model_type: str = ""
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    intermediate_size: int  # dense MLP (and the first_k_dense layers of a MoE)
    vocab_size: int
    tie_word_embeddings: bool = False
    max_position_embeddings: int = 131072
    # MoE (None / 0 = dense model)
    n_routed_experts: int = 0
    num_experts_per_tok: int = 0
    n_shared_experts: int = 0
    moe_intermediate_size: int = 0
    first_k_dense_replace: int = 0
    # MLA (DeepSeek-style latent attention); None = ordinary (GQA) attention
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    # DSA sparse-attention indexer (GLM-5): each query attends to index_topk selected tokens
    index_topk: int | None = None
    index_n_heads: int | None = None
    index_head_dim: int | None = None
    mtp_layers: int = 0  # num_nextn_predict_layers: MTP draft layers stored after the last layer
    # Layers whose KV grows with the context (None: all). Hybrid models keep a bounded state in
    # the others: Qwen3.5's Gated-DeltaNet layers (3 of every 4), gpt-oss's 128-token sliding
    # windows (every other layer) -- they read and store almost nothing per token of context.
    kv_layers: int | None = None

    # ---- shapes ----
    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def kv_heads(self) -> int:
        return self.num_key_value_heads or self.num_attention_heads

    @property
    def hdim(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def moe_layers(self) -> int:
        return self.num_hidden_layers - self.first_k_dense_replace if self.is_moe else 0

    @property
    def context_layers(self) -> int:
        return self.num_hidden_layers if self.kv_layers is None else self.kv_layers

    @property
    def dense_layers(self) -> int:
        return self.num_hidden_layers - self.moe_layers

    # ---- parameter counts (linear weights; norms are negligible and left out) ----
    def attention_params(self) -> int:
        h, n = self.hidden_size, self.num_attention_heads
        if self.is_mla:
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (h * self.q_lora_rank + self.q_lora_rank * n * qk) if self.q_lora_rank else h * n * qk
            kv = h * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * n * (
                self.qk_nope_head_dim + self.v_head_dim)
            o = n * self.v_head_dim * h
            idx = 0
            if self.index_n_heads:
                qin = self.q_lora_rank or h
                idx = qin * self.index_n_heads * self.index_head_dim + h * self.index_head_dim + h * self.index_n_heads
            return q + kv + o + idx
        d = self.hdim
        return h * n * d + 2 * h * self.kv_heads * d + n * d * h

    def expert_params(self) -> int:
        """One expert's gate+up+down (SwiGLU)."""
        return 3 * self.hidden_size * self.moe_intermediate_size

    def dense_mlp_params(self) -> int:
        return 3 * self.hidden_size * self.intermediate_size

    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size * (1 if self.tie_word_embeddings else 2)

    def routed_params(self) -> int:
        return self.moe_layers * self.n_routed_experts * self.expert_params()

    def nonrouted_params(self) -> int:
        """Attention, dense MLPs, shared experts, router: read in full by every decode step."""
        moe = self.moe_layers * (self.n_shared_experts * self.expert_params()
                                 + self.hidden_size * self.n_routed_experts)
        return self.num_hidden_layers * self.attention_params() + self.dense_layers * self.dense_mlp_params() + moe

    def mtp_params(self) -> int:
        """One MTP layer: a full decoder block plus eh_proj (2h -> h)."""
        if not self.mtp_layers:
            return 0
        block = self.attention_params() + (
            (self.n_routed_experts + self.n_shared_experts) * self.expert_params() if self.is_moe
            else self.dense_mlp_params())
        return self.mtp_layers * (block + 2 * self.hidden_size * self.hidden_size)

    @property
    def total_params(self) -> int:
        """Without the MTP layers (as model cards quote them)."""
        return self.routed_params() + self.nonrouted_params() + self.embedding_params()

    @property
    def active_params(self) -> int:
        routed = self.moe_layers * self.num_experts_per_tok * self.expert_params()
        return routed + self.nonrouted_params() + self.embedding_params()

    # ---- bytes ----
    def weight_bytes(self, precision: str) -> float:
        """Checkpoint bytes: linear layers in `precision`; embeddings and MTP layers stay bf16
        (as in the Quark MXFP4 and official FP8 checkpoints: they are on the exclude list)."""
        p = get_precision(precision)
        q = self.routed_params() + self.nonrouted_params()
        return q * p.bytes_per_weight + (self.embedding_params() + self.mtp_params()) * 2.0

    def kv_bytes_per_token(self, kv_dtype: str = "auto") -> float:
        """KV-cache bytes per token for the whole model. MLA stores the compressed latent
        (kv_lora + rope) per layer, shared by all heads; DSA adds the indexer's key per layer."""
        b = kv_elem_bytes(kv_dtype)
        if self.is_mla:
            per_layer = (self.kv_lora_rank + self.qk_rope_head_dim) * b + (self.index_head_dim or 0) * 1.0
        else:
            per_layer = 2 * self.kv_heads * self.hdim * b
        return per_layer * self.context_layers

    def moe_shapes(self, tp: int = 1, ep: int = 1) -> MoeShape:
        """Expert GEMM shapes on one shard: with expert parallelism (ep > 1) experts are split
        and each keeps the full intermediate size; otherwise TP splits the intermediate size."""
        if not self.is_moe:
            raise BadInput(f"model {self.name!r} is not a mixture-of-experts model")
        if ep > 1:
            return MoeShape(E=self.n_routed_experts // ep, N=self.moe_intermediate_size,
                            K=self.hidden_size, topk=self.num_experts_per_tok)
        return MoeShape(E=self.n_routed_experts, N=self.moe_intermediate_size // tp,
                        K=self.hidden_size, topk=self.num_experts_per_tok)


def get_precision(name: str) -> Precision:
    if name not in PRECISIONS:
        raise unknown("weight precision", name, PRECISIONS)
    return PRECISIONS[name]


def kv_elem_bytes(kv_dtype: str) -> float:
    if kv_dtype not in KV_DTYPE_BYTES:
        raise unknown("KV cache dtype", kv_dtype, KV_DTYPE_BYTES)
    return KV_DTYPE_BYTES[kv_dtype]


# Built-in cards: fields as in each model's HF config.json (see FACTS.md "Models").
_BUILTIN = {
    "glm-5.2": dict(architecture="GlmMoeDsaForCausalLM", model_type="glm_moe_dsa", hidden_size=6144,
                    num_hidden_layers=78, num_attention_heads=64, num_key_value_heads=64,
                    intermediate_size=12288, vocab_size=154880, max_position_embeddings=202752,
                    n_routed_experts=256, num_experts_per_tok=8, n_shared_experts=1,
                    moe_intermediate_size=2048, first_k_dense_replace=3, q_lora_rank=2048,
                    kv_lora_rank=512, qk_nope_head_dim=192, qk_rope_head_dim=64, v_head_dim=256,
                    index_topk=2048, index_n_heads=32, index_head_dim=128, mtp_layers=1),
    "deepseek-v3": dict(architecture="DeepseekV3ForCausalLM", model_type="deepseek_v3", hidden_size=7168,
                        num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
                        intermediate_size=18432, vocab_size=129280, max_position_embeddings=163840,
                        n_routed_experts=256, num_experts_per_tok=8, n_shared_experts=1,
                        moe_intermediate_size=2048, first_k_dense_replace=3, q_lora_rank=1536,
                        kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                        mtp_layers=1),
    "qwen3-235b-a22b": dict(architecture="Qwen3MoeForCausalLM", model_type="qwen3_moe", hidden_size=4096,
                            num_hidden_layers=94, num_attention_heads=64, num_key_value_heads=4,
                            head_dim=128, intermediate_size=12288, vocab_size=151936,
                            max_position_embeddings=40960, n_routed_experts=128, num_experts_per_tok=8,
                            moe_intermediate_size=1536),
    "glm-4.5": dict(architecture="Glm4MoeForCausalLM", model_type="glm4_moe", hidden_size=5120,
                    num_hidden_layers=92, num_attention_heads=96, num_key_value_heads=8, head_dim=128,
                    intermediate_size=12288, vocab_size=151552, max_position_embeddings=131072,
                    n_routed_experts=160, num_experts_per_tok=8, n_shared_experts=1,
                    moe_intermediate_size=1536, first_k_dense_replace=3, mtp_layers=1),
    # Kimi-K2 (moonshotai/Kimi-K2-Instruct config.json, DeepseekV3ForCausalLM): DeepSeek-V3's
    # shapes with 384 routed experts, 64 heads, one dense layer, no MTP layer; ~1.04T / 32B active.
    "kimi-k2": dict(architecture="DeepseekV3ForCausalLM", model_type="kimi_k2", hidden_size=7168,
                    num_hidden_layers=61, num_attention_heads=64, num_key_value_heads=64,
                    intermediate_size=18432, vocab_size=163840, max_position_embeddings=262144,
                    n_routed_experts=384, num_experts_per_tok=8, n_shared_experts=1,
                    moe_intermediate_size=2048, first_k_dense_replace=1, q_lora_rank=1536,
                    kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128),
    # DeepSeek-V3.2 (deepseek-ai/DeepSeek-V3.2-Exp config.json): V3's shapes plus the DSA
    # lightning indexer (index_n_heads 64, index_head_dim 128, index_topk 2048).
    "deepseek-v3.2": dict(architecture="DeepseekV32ForCausalLM", model_type="deepseek_v32", hidden_size=7168,
                          num_hidden_layers=61, num_attention_heads=128, num_key_value_heads=128,
                          intermediate_size=18432, vocab_size=129280, max_position_embeddings=163840,
                          n_routed_experts=256, num_experts_per_tok=8, n_shared_experts=1,
                          moe_intermediate_size=2048, first_k_dense_replace=3, q_lora_rank=1536,
                          kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                          index_topk=2048, index_n_heads=64, index_head_dim=128, mtp_layers=1),
    # Qwen3.5-397B-A17B (Qwen/Qwen3.5-397B-A17B config.json text_config): 60 layers, full
    # attention every 4th (full_attention_interval 4; the rest Gated-DeltaNet), 32 heads / 2 KV,
    # head_dim 256, 512 experts top-10 of 1024 plus a 1024-wide shared expert, vocab 248320.
    "qwen3.5-397b-a17b": dict(architecture="Qwen3_5MoeForConditionalGeneration", model_type="qwen3_5_moe",
                              hidden_size=4096, num_hidden_layers=60, num_attention_heads=32,
                              num_key_value_heads=2, head_dim=256, intermediate_size=1024,
                              vocab_size=248320, max_position_embeddings=262144, n_routed_experts=512,
                              num_experts_per_tok=10, n_shared_experts=1, moe_intermediate_size=1024,
                              kv_layers=15, mtp_layers=1),
    # gpt-oss-120b (openai/gpt-oss-120b config.json): 36 layers alternating 128-token sliding
    # window and full attention, 64 heads / 8 KV of 64, 128 experts top-4 of 2880, vocab 201088.
    "gpt-oss-120b": dict(architecture="GptOssForCausalLM", model_type="gpt_oss", hidden_size=2880,
                         num_hidden_layers=36, num_attention_heads=64, num_key_value_heads=8, head_dim=64,
                         intermediate_size=2880, vocab_size=201088, max_position_embeddings=131072,
                         n_routed_experts=128, num_experts_per_tok=4, moe_intermediate_size=2880,
                         kv_layers=18),
    # Llama-3.3-70B-Instruct and Llama-3.1-405B-Instruct (meta-llama config.json): dense GQA.
    "llama-3.3-70b": dict(architecture="LlamaForCausalLM", model_type="llama", hidden_size=8192,
                          num_hidden_layers=80, num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                          intermediate_size=28672, vocab_size=128256, max_position_embeddings=131072),
    "llama-3.1-405b": dict(architecture="LlamaForCausalLM", model_type="llama", hidden_size=16384,
                           num_hidden_layers=126, num_attention_heads=128, num_key_value_heads=8, head_dim=128,
                           intermediate_size=53248, vocab_size=128256, max_position_embeddings=131072),
    "smollm2-135m": dict(architecture="LlamaForCausalLM", model_type="llama", hidden_size=576,
                         num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                         intermediate_size=1536, vocab_size=49152, tie_word_embeddings=True,
                         max_position_embeddings=8192),
}
BUILTIN_NAMES = tuple(_BUILTIN)

# HF config.json keys that differ from ours, by model family.
_ALIASES = {"num_experts": "n_routed_experts", "num_nextn_predict_layers": "mtp_layers",
            "index_n_heads": "index_n_heads"}


def from_hf_config(path: str | Path, name: str | None = None) -> ModelCard:
    """A card from a local HF checkpoint dir or its config.json."""
    p = Path(path)
    cfg_path = p / "config.json" if p.is_dir() else p
    try:
        cfg = json.loads(cfg_path.read_text())
    except FileNotFoundError:
        raise BadInput(f"no config.json at {str(cfg_path)!r}") from None
    except json.JSONDecodeError as e:
        raise BadInput(f"{str(cfg_path)!r} is not valid JSON: {e}") from None
    fields = {_ALIASES.get(k, k): v for k, v in cfg.items()}
    archs = cfg.get("architectures") or ["unknown"]
    fields["architecture"] = archs[0]
    fields.setdefault("num_key_value_heads", fields.get("num_attention_heads"))
    if "shared_expert_intermediate_size" in cfg and cfg["shared_expert_intermediate_size"]:
        fields.setdefault("n_shared_experts", 1)
    fields["name"] = name or (p.name if p.is_dir() else p.parent.name)
    required = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    missing = [k for k in required if k not in fields]
    if missing:
        raise BadInput(f"{str(cfg_path)!r} lacks {', '.join(missing)}: not a decoder LLM config")
    return ModelCard(**fields)


def checkpoint_precision(path: str | Path) -> str | None:
    """The weight precision (a PRECISIONS name) of a local HF checkpoint, from its config.json's
    quantization_config: none is a 16-bit checkpoint (bf16 here); fp8 (quant_method fp8, or
    modelopt / compressed-tensors / quark FP8), mxfp4 (quant_method mxfp4, or quark's OCP MX fp4),
    nvfp4 (modelopt NVFP4). None where there is no config.json or the method is none of these (an
    int4 AWQ/GPTQ checkpoint): the precision is then not known."""
    p = Path(path)
    try:
        cfg = json.loads((p / "config.json" if p.is_dir() else p).read_text())
    except (OSError, ValueError):
        return None
    qc = cfg.get("quantization_config") if isinstance(cfg, dict) else None
    if not qc:
        return "bf16"
    method, text = str(qc.get("quant_method", "")).lower(), json.dumps(qc).lower()
    if method == "mxfp4" or (method == "quark" and "fp4" in text):
        return "mxfp4"
    if method in ("modelopt", "compressed-tensors") and "nvfp4" in text:
        return "nvfp4"
    fp8_groups = '"num_bits": 8' in text and '"type": "float"' in text  # compressed-tensors' form
    if method in ("fp8", "fbgemm_fp8") or (method in ("modelopt", "compressed-tensors", "quark")
                                           and ("fp8" in text or fp8_groups)):
        return "fp8"
    return None


def get_model(name_or_path: str) -> ModelCard:
    """A built-in card by name, or a card read from a local HF checkpoint dir / config.json."""
    if name_or_path in _BUILTIN:
        return ModelCard(name=name_or_path, **_BUILTIN[name_or_path])
    p = Path(name_or_path)
    if p.exists():
        return from_hf_config(p)
    raise BadInput(f"unknown model {name_or_path!r}; allowed: {', '.join(BUILTIN_NAMES)} "
                   f"or a local directory with a HF config.json")
