"""Serving framework adapters: flag schemas, argv builders, ready lines, log diagnosis.

    from tools.frameworks import get
    fw = get("sglang"); fw.validate(candidate); argv = fw.argv(candidate, model=..., port=...)
"""
from __future__ import annotations

from agent.errors import unknown
from tools.frameworks.base import FlagError, FlagSpec, Framework

NAMES = ("vllm", "sglang", "atom")
# Adapters outside the story's three (not planned by default; a sandbox names them in `frameworks`):
# transformers' own server, the real GPU ground of gpu/ (issue 7).
EXTRA = ("transformers",)
_cache: dict[str, Framework] = {}


def get(name: str) -> Framework:
    """The adapter for a framework name; BadInput naming the allowed names otherwise."""
    if name not in NAMES + EXTRA:
        raise unknown("framework", name, NAMES + EXTRA)
    if name not in _cache:
        if name == "vllm":
            from tools.frameworks.vllm import VLLM as cls
        elif name == "transformers":
            from tools.frameworks.transformers_serve import TransformersServe as cls
        elif name == "sglang":
            from tools.frameworks.sglang import SGLang as cls
        else:
            from tools.frameworks.atom import Atom as cls
        _cache[name] = cls()
    return _cache[name]


__all__ = ["NAMES", "EXTRA", "get", "FlagError", "FlagSpec", "Framework"]
