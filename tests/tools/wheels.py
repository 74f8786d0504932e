"""The frameworks' PyPI wheels for tests that need their real code (the generator's test, the real
parsers): kept under the testbed cache (`<INFERLOOP_TESTBED_DIR>/wheels`), so only the first run
downloads; a test skips, naming the index, when a wheel is missing and the index cannot be reached."""
from __future__ import annotations

import os
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sandboxes.testbed import paths
from tools.frameworks.schemas import generate


def cache() -> Path:
    return paths.root() / "wheels"


def index_unreachable() -> str | None:
    """Why the package index cannot be reached, or None when it answers."""
    url = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple/").rstrip("/") + "/pip/"
    try:
        urllib.request.urlopen(url, timeout=10).close()
    except (urllib.error.URLError, OSError) as e:
        return f"the package index {url} is not reachable ({getattr(e, 'reason', e)})"
    return None


def need(*specs: str) -> None:
    """Skip unless every `name==version` is cached or the index can be asked for it."""
    missing = [s for s in specs if generate.cached_wheel(s, cache()) is None]
    if missing and (why := index_unreachable()):
        pytest.skip(f"{why}; {', '.join(missing)} not in {cache()}")


def unpacked(spec: str, dest: Path) -> tuple[Path, list[Path]]:
    """The wheel's sources unpacked under dest, and the real dependencies its parser imports."""
    need(spec, *generate.REAL_DEPS)
    root = dest / spec.replace("==", "-")
    if not root.exists():
        generate.unpack(generate.pip_download(spec, dest / "dl", cache()), root)
    return root, generate._deps(dest, cache())
