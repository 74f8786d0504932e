"""Versioned flag schemas of the serving frameworks, generated from their real parsers.

One JSON per framework version in this folder (`<framework>-<version>.json`, written by
`python -m tools.frameworks.schemas.generate`). `load(fw, v)` reads one; `resolve(fw, v)` picks the
version to use for a requested one: itself when known, else the nearest known, with a note.
"""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

HERE = Path(__file__).parent


def schema_path(framework: str, version: str) -> Path:
    return HERE / f"{framework}-{version}.json"


def versions(framework: str) -> list[str]:
    """Known versions, oldest first (ATOM's are commit dates, which sort the same way)."""
    found = [p.stem[len(framework) + 1:] for p in HERE.glob(f"{framework}-*.json")]
    return sorted(found, key=_key)


def newest(framework: str) -> str | None:
    v = versions(framework)
    return v[-1] if v else None


def _key(v: str) -> tuple:
    return tuple(int(x) for x in re.findall(r"\d+", v))


@functools.lru_cache(maxsize=None)
def load(framework: str, version: str) -> dict:
    return json.loads(schema_path(framework, version).read_text())


def resolve(framework: str, version: str | None) -> tuple[str | None, str | None]:
    """(known version to use, note or None). None asks for the newest. An unknown version uses
    the nearest known one by version number (the newest not above it, else the oldest)."""
    known = versions(framework)
    if not known:
        return None, None
    if version is None or version in ("", "latest", "newest"):
        return known[-1], None
    if version in known:
        return version, None
    if not re.search(r"\d", version):
        raise ValueError(f"bad {framework} version {version!r}; known: {', '.join(known)}")
    below = [k for k in known if _key(k) <= _key(version)]
    use = below[-1] if below else known[0]
    return use, f"{framework} {version} has no schema; using the nearest known version {use} (known: {', '.join(known)})"
