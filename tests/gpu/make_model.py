"""Make the GPU test model: a miniature of GLM-5.2's architecture, random weights from a seed.

No weights travel: the device builds the model from this config and a seed, saves it as a normal
HF checkpoint, and copies a small real tokenizer next to it (SmolLM2's, from the testbed build;
only its vocabulary size matters to the model). The model class is transformers'
GlmMoeDsaForCausalLM (GLM-5/5.2: MLA attention with the DSA indexer, a shared expert plus routed
experts top-8, leading dense layers); `--arch glm4_moe` is the fallback (GLM-4.5's class: plain GQA
attention) should the DSA model not serve.

Random weights make accuracy meaningless; quality is judged as greedy-output parity against the
reference configuration (tools/evals/context_parity.py). EOS is switched off in the configs so a random model
never stops early: every request then generates exactly `max_tokens` (the server has no
`ignore_eos`).

    python tests/gpu/make_model.py --out /tmp/glm52-mini --tokenizer .tok --size gpu --seed 0
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")
ARCHS = ("glm_moe_dsa", "glm4_moe")

# GLM-5.2 (FACTS.md): hidden 6144, 78 layers (3 dense), 64 heads, MLA q_lora 2048 / kv_lora 512,
# qk_nope 192 / rope 64, v 256, intermediate 12288, moe_intermediate 2048, 256 experts top-8 + 1
# shared, DSA indexer 32 heads x 128, topk 2048. The miniature keeps the structure and the ratios
# that shape the kernels (top-8 routing, a shared expert, MLA, the indexer) at a size one H200
# loads in seconds yet keeps busy with batched decode.
SIZES = {
    "gpu": dict(hidden_size=2048, num_hidden_layers=6, first_k_dense_replace=1, num_attention_heads=16,
                num_key_value_heads=16, q_lora_rank=768, kv_lora_rank=256, qk_nope_head_dim=64,
                qk_rope_head_dim=32, v_head_dim=64, intermediate_size=5632, moe_intermediate_size=512,
                n_routed_experts=64, num_experts_per_tok=8, n_shared_experts=1, index_n_heads=8,
                index_head_dim=64, index_topk=256, max_position_embeddings=4096),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, first_k_dense_replace=1, num_attention_heads=4,
                 num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16,
                 qk_rope_head_dim=8, v_head_dim=16, intermediate_size=128, moe_intermediate_size=32,
                 n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, index_n_heads=2,
                 index_head_dim=16, index_topk=32, max_position_embeddings=1024),
}


def config_dict(size: str, vocab_size: int, arch: str = "glm_moe_dsa") -> dict:
    """The HF config of the test model (plain dict; the maker turns it into the config class)."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; allowed: {', '.join(SIZES)}")
    if arch not in ARCHS:
        raise ValueError(f"unknown arch {arch!r}; allowed: {', '.join(ARCHS)}")
    s = dict(SIZES[size])
    common = dict(vocab_size=vocab_size, bos_token_id=None, eos_token_id=None, pad_token_id=None,
                  tie_word_embeddings=False, initializer_range=0.02, rms_norm_eps=1e-5,
                  routed_scaling_factor=2.5, norm_topk_prob=True, n_group=1, topk_group=1)
    if arch == "glm_moe_dsa":
        return {"architectures": ["GlmMoeDsaForCausalLM"], "model_type": "glm_moe_dsa", **s, **common}
    # GLM-4.5's class: GQA instead of MLA/DSA; same MoE block.
    heads = s["num_attention_heads"]
    return {"architectures": ["Glm4MoeForCausalLM"], "model_type": "glm4_moe", **common,
            **{k: s[k] for k in ("hidden_size", "num_hidden_layers", "first_k_dense_replace",
                                 "intermediate_size", "moe_intermediate_size", "n_routed_experts",
                                 "num_experts_per_tok", "n_shared_experts", "max_position_embeddings")},
            "num_attention_heads": heads, "num_key_value_heads": max(heads // 4, 1),
            "head_dim": s["hidden_size"] // heads, "partial_rotary_factor": 0.5}


def vocab_size_of(tokenizer_dir: Path) -> int:
    """Size of the tokenizer's vocabulary, added tokens included (tokenizer.json only)."""
    tj = json.loads((Path(tokenizer_dir) / "tokenizer.json").read_text())
    ids = list(tj["model"]["vocab"].values()) + [t["id"] for t in tj.get("added_tokens", [])]
    return max(ids) + 1


def _sha256(files: list[Path]) -> str:
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            while chunk := fh.read(1 << 24):
                h.update(chunk)
    return h.hexdigest()


def make(out: Path, tokenizer_dir: Path, *, size: str, seed: int, arch: str = "glm_moe_dsa",
         device: str | None = None) -> dict:
    import torch
    import transformers

    cfg = config_dict(size, vocab_size_of(tokenizer_dir), arch)
    t0 = time.time()
    config = transformers.AutoConfig.for_model(**{k: v for k, v in cfg.items() if k != "architectures"})
    config.architectures = cfg["architectures"]
    cls = getattr(transformers, cfg["architectures"][0])
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    if dev.startswith("cuda"):
        torch.cuda.manual_seed_all(seed)
    with torch.device(dev):
        model = cls(config)
    model = model.to(torch.bfloat16).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    model.generation_config.pad_token_id = None
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (Path(tokenizer_dir) / name).is_file():
            shutil.copy2(Path(tokenizer_dir) / name, out / name)
    n_params = sum(p.numel() for p in model.parameters())
    info = {"arch": arch, "class": cfg["architectures"][0], "size": size, "seed": seed, "device": dev,
            "params": n_params, "weight_bytes": sum(f.stat().st_size for f in out.glob("*.safetensors")),
            "config_sha256": hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16],
            "weights_sha256": _sha256(sorted(out.glob("*.safetensors")))[:16],  # same seed -> same bytes?
            "transformers": transformers.__version__, "torch": torch.__version__,
            "seconds": round(time.time() - t0, 1)}
    (out / "inferloop_model.json").write_text(json.dumps(info, indent=1) + "\n")
    del model
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", required=True, help="folder with tokenizer.json (+ its config files)")
    ap.add_argument("--size", default="gpu", choices=sorted(SIZES))
    ap.add_argument("--arch", default="glm_moe_dsa", choices=ARCHS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None)
    a = ap.parse_args()
    print(json.dumps(make(Path(a.out), Path(a.tokenizer), size=a.size, seed=a.seed, arch=a.arch, device=a.device)))


if __name__ == "__main__":
    main()
