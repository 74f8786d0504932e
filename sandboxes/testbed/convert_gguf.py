"""Run inside the throwaway converter venv (torch, transformers<5, gguf, accelerate):
    python convert_gguf.py GGUF_FILE OUT_DIR
Writes bf16 safetensors + tokenizer. vLLM 0.32 no longer loads GGUF, transformers 5 will not save
a GGUF-loaded model, hence transformers<5 here. Standalone on purpose: it imports nothing of ours.
"""
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main() -> None:
    gguf, out = Path(sys.argv[1]), Path(sys.argv[2])
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, torch_dtype=torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tok.save_pretrained(out)
    print(f"converted {gguf.name} -> {out} ({sum(p.numel() for p in model.parameters())} parameters)")


if __name__ == "__main__":
    main()
