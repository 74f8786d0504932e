"""Serving framework adapters: flag schemas, argv builders, ready lines, log diagnosis.

    from tools.frameworks import get
    fw = get("sglang"); fw.validate(candidate); argv = fw.argv(candidate, model=..., port=...)
"""
from __future__ import annotations

from tools.errors import BadInput, unknown
from tools.frameworks.base import FlagError, FlagSpec, Framework

NAMES = ("vllm", "sglang", "atom")
# Adapters outside the story's three (not planned by default; a sandbox names them in `frameworks`):
# transformers' own server, the real GPU ground of tests/gpu/ (issue 7).
EXTRA = ("transformers",)
_cache: dict[str, Framework] = {}


def get(name: str, version: str | None = None) -> Framework:
    """The adapter for a framework name at a version (None: the newest known; an unknown version:
    the nearest known, with `version_note` saying so); BadInput naming the allowed names otherwise."""
    if name not in NAMES + EXTRA:
        raise unknown("framework", name, NAMES + EXTRA)
    if name in NAMES:
        return for_version(name, version)
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


def for_version(name: str, version: str | None = None):
    from tools.frameworks import schemas
    try:
        schemas.resolve(name, version)
    except ValueError as e:
        raise BadInput(str(e)) from None
    if name == "vllm":
        from tools.frameworks.vllm import VLLM as cls
    elif name == "sglang":
        from tools.frameworks.sglang import SGLang as cls
    else:
        from tools.frameworks.atom import Atom as cls
    return cls.for_version(version)


def versions(name: str) -> list[str]:
    """The versions of a framework with a shipped schema, oldest first."""
    from tools.frameworks import schemas
    return schemas.versions(name) if name in NAMES else []


__all__ = ["versions", "for_version", "NAMES", "EXTRA", "get", "FlagError", "FlagSpec", "Framework"]
