"""Repair the tokenizer that transformers writes for a GGUF-loaded SmolLM2.

As converted, vLLM detokenizes it into byte-level garbage ("ĊĊTheĠanswer...") and prepends a BOS
the model was not trained with. SmolLM2's own tokenizer has no post-processor, a ByteLevel
decoder and no BOS; this puts those back. Pure JSON edits, so it is testable without the model.
"""
from __future__ import annotations

import json
from pathlib import Path

BYTE_LEVEL_DECODER = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}


def fix_tokenizer_json(data: dict) -> dict:
    out = dict(data)
    out["post_processor"] = None
    out["decoder"] = dict(BYTE_LEVEL_DECODER)
    return out


def fix_tokenizer_config(data: dict) -> dict:
    out = dict(data)
    out["add_bos_token"] = False
    return out


def fix_model_dir(model_dir: Path) -> None:
    for name, fix in (("tokenizer.json", fix_tokenizer_json), ("tokenizer_config.json", fix_tokenizer_config)):
        path = model_dir / name
        if not path.exists():
            raise FileNotFoundError(f"{path} missing: the GGUF conversion did not write a tokenizer")
        data = json.loads(path.read_text())
        path.write_text(json.dumps(fix(data), indent=2, ensure_ascii=False))
