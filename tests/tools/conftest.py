"""Fixtures for the real-tools tests: a fake framework interpreter and process-table checks."""
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.fixture
def fake_python(tmp_path) -> str:
    """An executable that behaves like `python -m <framework>` but runs the mock server."""
    p = tmp_path / "fakepython"
    # This checkout's code, not whatever an editable install of another checkout points at; last on
    # the path so a PYTHONPATH the sandbox sets (a patched per-run copy) still comes first.
    p.write_text(f"#!/bin/sh\nPYTHONPATH=\"${{PYTHONPATH:+$PYTHONPATH:}}{REPO}\" "
                 f"exec {sys.executable} {HERE / 'fake_framework.py'} \"$@\"\n")
    p.chmod(0o755)
    return str(p)

