"""Issue 16 on the real CPU testbed: sglang 0.5.23 and transformers serve beside vLLM-CPU.

- the adapters' argv, as LocalSandbox would launch it, parsed by the real parsers in the real venvs
  (sglang's argparse ServerArgs, transformers' click command), which also reject a bogus flag;
- the real patch path: the installed sglang dies at start on its unconditional optional imports,
  the real log is diagnosed, the catalogue's patch is applied to the run's copy (the installed
  package is unchanged), and the patched sglang serves and answers;
- stopping it leaves no process of its group, and none that imports the run's copy, in /proc.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from agent.planners.fixes import fixes_for
from sandboxes.local import LocalSandbox
from sandboxes.testbed import framework_venvs, paths, proctable
from sandboxes.testbed.serve import vllm_env
from tools import frameworks, patch
from tools.candidate import Candidate
from tools.protocols import LaunchFailure

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


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _importing(tree: Path) -> list[int]:
    """Live processes whose PYTHONPATH names the run's copy of sglang (a child that left the group)."""
    out = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                if str(tree.parent).encode() in Path(f"/proc/{e}/environ").read_bytes():
                    out.append(int(e))
            except OSError:
                continue
    return out


def test_patched_sglang_serves_and_stops_clean(testbed, pys, tmp_path):
    sb = LocalSandbox(testbed.model_dir, model_name=testbed.model_name, python=str(testbed.python),
                      pythons={"sglang": pys["sglang"]}, base_env=vllm_env(), ready_timeout_s=600)
    c, _ = _sglang()
    installed = sb.package_dir("sglang")
    before = {f: _sha(installed / f) for f in ("srt/multimodal/internvl_utils.py", "srt/mem_cache/allocation.py")}
    run = tmp_path / "run"
    seen = []
    for attempt in range(3):  # the installed sglang fails on torchvision, then on sgl_kernel
        try:
            server = sb.launch(c, run)  # one run dir: its src/ copy is what the next launch imports
            break
        except LaunchFailure as e:
            d = e.diagnosis
            assert d is not None and d.kind == "missing_module", (d, e.excerpt)
            seen.append(d.details["module"])
            tree = sb.source_tree("sglang", run)
            (fx,) = fixes_for([d.model_dump()], c, card=None, hw=None, tree=tree, framework=SGL)
            assert fx.name == "guard_optional_import"
            patch.apply(tree, fx.diff, f"p{attempt}", fx.title)
    else:
        pytest.fail(f"sglang never started; failures: {seen}")
    assert seen == ["torchvision", "sgl_kernel"]
    try:
        assert "The server is fired up and ready to roll!" in server.log_text()
        members = proctable.group_members(server.handle.pgid)
        assert len(members) >= 2, members  # the launcher and its scheduler/detokenizer processes
        r = httpx.post(server.url + "/v1/chat/completions", timeout=300, json={
            "model": testbed.model_name, "max_tokens": 12, "temperature": 0,
            "messages": [{"role": "user", "content": "What is the capital of France?"}]})
        assert r.status_code == 200 and "paris" in r.json()["choices"][0]["message"]["content"].lower(), r.text
    finally:
        server.stop()
    assert proctable.wait_group_gone(server.handle.pgid) == []
    assert all(not Path(f"/proc/{pid}").exists() for pid, _ in members)
    assert _importing(tree) == []
    assert {f: _sha(installed / f) for f in before} == before  # the user's installation is untouched
