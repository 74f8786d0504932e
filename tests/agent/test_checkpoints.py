"""A checkpoint per weight precision (`--model-path PRECISION=DIR`, repeatable): on a real node the
precision phase serves each precision from its own checkpoint, and nothing else. Bad values exit 2
naming the value and what is allowed, before anything runs."""
import json
import sys

import pytest

from agent.cmd_common import parse_model_paths
from agent.errors import BadInput
from agent.report import served_checkpoint
from sandboxes.local import checkpoints_of
from tools.hardware import get_hardware

FP8 = {"quantization_config": {"quant_method": "fp8"}}
AWQ = {"quantization_config": {"quant_method": "awq", "bits": 4}}


def _ckpt(path, cfg=None):
    path.mkdir()
    (path / "config.json").write_text(json.dumps(cfg or {}))
    return str(path)


def test_plain_and_named_values_split():
    assert parse_model_paths(["/m/glm", "fp8=/m/glm-fp8", "mxfp4=rel/dir"]) == (
        "/m/glm", {"fp8": "/m/glm-fp8", "mxfp4": "rel/dir"})
    assert parse_model_paths(["/m/a=b"]) == ("/m/a=b", {})  # a '/' before the '=': a path
    assert parse_model_paths(None) == (None, {})


@pytest.mark.parametrize("values,words", [
    (["int4=/x"], "unknown weight precision 'int4'; allowed: bf16, fp8, mxfp4, nvfp4"),
    (["fp8="], "no directory after '='"),
    (["fp8=/a", "fp8=/b"], "fp8 given twice"),
    (["/a", "/b"], "a second checkpoint (first '/a'); name each by its precision"),
])
def test_bad_values_name_themselves(values, words):
    with pytest.raises(BadInput, match=words.replace("(", r"\(").replace(")", r"\)")):
        parse_model_paths(values)


def test_the_run_s_checkpoints_by_precision(tmp_path):
    bf16, fp8 = _ckpt(tmp_path / "glm"), _ckpt(tmp_path / "glm-fp8", FP8)

    class T:
        model_path, checkpoints = bf16, {"fp8": fp8}
    default, ckpts = checkpoints_of(T)
    assert str(default) == bf16 and {w: str(d) for w, d in ckpts.items()} == {"fp8": fp8, "bf16": bf16}
    T.model_path = None  # named only: the first is the default
    assert str(checkpoints_of(T)[0]) == fp8 and set(checkpoints_of(T)[1]) == {"fp8"}
    T.model_path, T.checkpoints = bf16, {}  # one checkpoint: {} (its precision read when needed)
    assert checkpoints_of(T) == (tmp_path / "glm", {})


def test_launch_sh_serves_the_checkpoint_of_the_best_s_weights():
    t = {"model_path": "/m/glm", "checkpoints": {"fp8": "/m/glm-fp8"}}
    assert served_checkpoint(t, "fp8", "glm-5.2") == "/m/glm-fp8"
    assert served_checkpoint(t, "bf16", "glm-5.2") == "/m/glm"  # the plain DIR's
    assert served_checkpoint({}, "bf16", "glm-5.2") == "glm-5.2"  # the sim: the model's name


OPT = ["optimize", "--model", "glm-5.2", "--hw", "cpu", "--budget", "1", "--backend", "local"]


@pytest.mark.parametrize("make,words", [
    (lambda p: ["--model-path", "fp8=" + _ckpt(p / "a")], "its config.json holds bf16 weights, not fp8"),
    (lambda p: ["--model-path", "fp8=" + str(p / "none")], "is not a directory"),
    (lambda p: ["--model-path", _ckpt(p / "a", AWQ), "--model-path", "fp8=" + _ckpt(p / "b", FP8)],
     "its weight precision is not known from its config.json; name it"),
    (lambda p: ["--model-path", _ckpt(p / "a"), "--model-path", "bf16=" + _ckpt(p / "b")],
     "are both bf16 checkpoints: give one"),
    (lambda p: ["--model-path", "fp8=" + _ckpt(p / "a", FP8), "--backend", "sim"], "is for real backends"),
])
def test_cli_exits_2(agent, tmp_path, make, words):
    r = agent(*OPT, *make(tmp_path), "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert words in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()


def test_the_local_and_docker_grounds_open_with_every_checkpoint(tmp_path, monkeypatch):
    from types import SimpleNamespace as NS

    from sandboxes import registry
    from sandboxes.docker import DockerSandbox
    site = tmp_path / "site" / "vllm"  # an interpreter that has vllm (what the local ground probes)
    site.mkdir(parents=True)
    (site / "__init__.py").write_text("")
    py = tmp_path / "python"
    py.write_text(f"#!/bin/sh\nPYTHONPATH={site.parent} exec {sys.executable} \"$@\"\n")
    py.chmod(0o755)
    bf16, fp8 = _ckpt(tmp_path / "glm"), _ckpt(tmp_path / "glm-fp8", FP8)
    t = NS(model="glm", hw="h200", model_path=bf16, checkpoints={"fp8": fp8}, python=str(py), pythons={}, images={"vllm": "img"})
    cfg = NS(target=t, backend="local", seed=0)
    sb = registry.open_sandbox("local", cfg, None, None)
    assert sb.weights == ("bf16", "fp8") and str(sb.model_dir) == bf16
    monkeypatch.setattr(DockerSandbox, "check_images", lambda self: None)  # no engine here
    sb = registry.open_sandbox("docker", NS(target=t, backend="docker", seed=0), None, get_hardware("h200"))
    assert sb.weights == ("bf16", "fp8") and {w: str(d) for w, d in sb.checkpoints.items()} == {"bf16": bf16, "fp8": fp8}
