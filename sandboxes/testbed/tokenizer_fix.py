"""Repair the tokenizer that transformers 4 writes for a GGUF-loaded SmolLM2.

As converted, vLLM (transformers 5) detokenizes it into byte-level garbage ("ĊĊTheĠanswer..."):
the config names `LlamaTokenizer`, which transformers 5 rebuilds with a sentencepiece-style
(Metaspace) decoder and encoder, ignoring tokenizer.json's byte-level BPE. The converter also
adds a BOS the model was not trained with and takes `<|im_start|>` for the EOS token. SmolLM2's
own tokenizer is plain byte-level BPE: no post-processor, a ByteLevel decoder, no BOS, EOS
`<|im_end|>`. This puts those back. Pure JSON edits, so it is testable without the model.
"""
from __future__ import annotations

import json
from pathlib import Path

BYTE_LEVEL_DECODER = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}
# Loads tokenizer.json as written, in transformers 4 and 5 alike.
TOKENIZER_CLASS = "PreTrainedTokenizerFast"


def fix_tokenizer_json(data: dict) -> dict:
    out = dict(data)
    out["post_processor"] = None
    out["decoder"] = dict(BYTE_LEVEL_DECODER)
    return out


def token_text(tokenizer_json: dict, token_id: int) -> str | None:
    for tok in tokenizer_json.get("added_tokens", []):
        if tok.get("id") == token_id:
            return tok.get("content")
    for text, i in tokenizer_json.get("model", {}).get("vocab", {}).items():
        if i == token_id:
            return text
    return None


def fix_tokenizer_config(data: dict, *, eos_token: str | None = None) -> dict:
    out = dict(data)
    out["add_bos_token"] = False
    out["tokenizer_class"] = TOKENIZER_CLASS
    if eos_token is not None:  # the model's own EOS id (config.json), as text
        out["eos_token"] = eos_token
    return out


def fix_model_dir(model_dir: Path) -> None:
    tok_path, cfg_path = model_dir / "tokenizer.json", model_dir / "tokenizer_config.json"
    for path in (tok_path, cfg_path):
        if not path.exists():
            raise FileNotFoundError(f"{path} missing: the GGUF conversion did not write a tokenizer")
    tok = json.loads(tok_path.read_text())
    eos = None
    config = model_dir / "config.json"
    if config.exists():
        eos_id = json.loads(config.read_text()).get("eos_token_id")
        if isinstance(eos_id, int):
            eos = token_text(tok, eos_id)
    tok_path.write_text(json.dumps(fix_tokenizer_json(tok), indent=2, ensure_ascii=False))
    cfg = fix_tokenizer_config(json.loads(cfg_path.read_text()), eos_token=eos)
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
    # A sentencepiece model written beside a BPE tokenizer only invites loaders to prefer it.
    (model_dir / "tokenizer.model").unlink(missing_ok=True)
