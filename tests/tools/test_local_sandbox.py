"""LocalSandbox end to end with a fake framework interpreter: validation, argv, env, MoE config
install, bad flags dying like argparse, source tree as git, tune_moe refusal on CPU."""
import subprocess
import sys

import httpx
import pytest

from agent.errors import BadInput
from sandboxes.local import LocalSandbox, NotSupported
from tools.candidate import Candidate, Parallel
from tools.protocols import LaunchFailure, Sandbox


def test_is_a_sandbox(tmp_path):
    assert isinstance(LocalSandbox(tmp_path), Sandbox)


def test_launch_serves_under_the_model_name_with_flags_and_moe_env(tmp_path, fake_python):
    model = tmp_path / "smol"
    model.mkdir()
    cfg = tmp_path / "E=8,N=128,device_name=cpu.json"
    cfg.write_text("{}")
    sb = LocalSandbox(model, model_name="smol", python=fake_python, ready_timeout_s=30)
    c = Candidate(framework="vllm", flags={"--max-num-seqs": 8, "--enforce-eager": True},
                  env={"VLLM_CPU_KVCACHE_SPACE": "1"}, moe_configs=[str(cfg)])
    with sb.launch(c, tmp_path / "run") as s:
        assert httpx.get(s.url + "/v1/models").json()["data"][0]["id"] == "smol"
        log = s.log_text()
        assert "flags --model=" in log and "--max-num-seqs=8" in log and "--enforce-eager=True" in log
        assert "env VLLM_CPU_KVCACHE_SPACE=1" in log
        assert f"env VLLM_TUNED_CONFIG_FOLDER={(tmp_path / 'run' / 'moe_configs').resolve()}" in log
        assert (tmp_path / "run" / "moe_configs" / cfg.name).exists()
        texts = __import__("asyncio").run(s.client.complete(["a", "b"], max_tokens=3))
        assert texts == ["tok tok tok "] * 2
        assert s.client.prompts is None  # no tokenizer.json in this model dir: approximate prompts
    assert sb.elapsed_s() > 0


def test_client_counts_prompt_tokens_with_the_served_models_tokenizer(tmp_path, fake_python):
    from toolhelpers_tok import make_tokenizer_dir
    model = make_tokenizer_dir(tmp_path / "tokmodel")
    sb = LocalSandbox(model, python=fake_python, ready_timeout_s=30)
    with sb.launch(Candidate(framework="vllm"), tmp_path / "run") as s:
        assert s.client.prompts.exact


def test_sglang_and_atom_launch(tmp_path, fake_python):
    # both read a tuned aiter table (ROCm) through aiter's own variable, the file itself
    table = tmp_path / "tuned_fmoe.csv"
    table.write_text("cu_num,token\n")
    for fw in ("sglang", "atom"):
        sb = LocalSandbox(tmp_path, model_name="w", python=fake_python, ready_timeout_s=30)
        c = Candidate(framework=fw, parallel=Parallel(tp=1), moe_configs=[str(table)])
        with sb.launch(c, tmp_path / fw) as s:
            served = httpx.get(s.url + "/v1/models").json()["data"][0]["id"]
            assert served == ("w" if fw == "sglang" else str(tmp_path))  # atom serves the path
            log = s.log_text()
            assert f"env AITER_CONFIG_FMOE={table.resolve()}" in log and "SGLANG_MOE_CONFIG_DIR" not in log


def test_invalid_candidate_is_rejected_before_launch(tmp_path, fake_python):
    sb = LocalSandbox(tmp_path, python=fake_python)
    with pytest.raises(BadInput, match="--max-num-seqs"):  # refused by every vLLM version's parser
        sb.launch(Candidate(framework="vllm", flags={"--max-num-seqs": "many"}), tmp_path / "r")
    with pytest.raises(BadInput, match="does not exist"):
        LocalSandbox(tmp_path / "nope", python=fake_python).launch(Candidate(framework="vllm"), tmp_path / "r")


def test_flag_the_cli_rejects_dies_with_bad_flag_diagnosis(tmp_path, fake_python):
    # --max-num-seqs is in our schema, but gets a value vLLM's argparse refuses ('4k' is fine for
    # --max-model-len, a human-readable int, but not for a plain int)
    sb = LocalSandbox(tmp_path, python=fake_python, ready_timeout_s=30)
    c = Candidate(framework="vllm", env={"FAKE_MODE": "ok"}, flags={"--max-num-seqs": "4k"})
    with pytest.raises(BadInput, match="invalid int value: '4k'"):
        sb.launch(c, tmp_path / "r")
    # a failure only the running server sees: the engine dies with a shape mismatch
    c = Candidate(framework="sglang", env={"FAKE_MODE": "die", "FAKE_LOG_LINE":
                  "RuntimeError: shape mismatch while loading model.eh_proj.weight: [6144, 6144] uint8 vs "
                  "[6144, 12288] bfloat16"})
    with pytest.raises(LaunchFailure) as e:
        sb.launch(c, tmp_path / "r2")
    assert e.value.diagnosis.kind == "shape_mismatch"
    assert e.value.diagnosis.details["param"] == "model.eh_proj.weight"


def test_source_tree_is_a_per_run_copy_and_the_installation_is_untouched(tmp_path):
    pkg = tmp_path / "site" / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    py = tmp_path / "py"
    py.write_text(f"#!/bin/sh\nPYTHONPATH={tmp_path / 'site'} exec {sys.executable} \"$@\"\n")
    py.chmod(0o755)
    sb = LocalSandbox(tmp_path, python=str(py))
    root = sb.source_tree("vllm", tmp_path / "run")
    assert root == tmp_path / "run" / "src" / "vllm" / "vllm" and (root / "__init__.py").read_text() == "X = 1\n"
    log = subprocess.run(["git", "-C", str(root), "log", "--oneline"], capture_output=True, text=True).stdout
    assert "pristine vllm" in log
    assert sb.source_tree("vllm", tmp_path / "run") == root  # idempotent
    assert sorted(p.name for p in pkg.iterdir()) == ["__init__.py"]  # issue 13 item 9: no git init in the install
    with pytest.raises(NotSupported, match="not installed"):
        sb.source_tree("sglang", tmp_path / "run")
    with pytest.raises(BadInput, match="unknown framework"):
        sb.source_tree("trt", tmp_path / "run")


def test_server_gets_no_secrets_and_imports_the_patched_copy(tmp_path, fake_python, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-should-not-leak")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "INFO")
    (tmp_path / "run" / "src" / "vllm" / "vllm").mkdir(parents=True)  # a source_tree copy exists
    sb = LocalSandbox(tmp_path, python=fake_python, ready_timeout_s=30)
    with sb.launch(Candidate(framework="vllm"), tmp_path / "run") as s:
        log = s.log_text()
    assert "sk-live" not in log and "hf_secret" not in log and "secret-env none" in log
    assert "env VLLM_LOGGING_LEVEL=INFO" in log
    assert f"pythonpath {(tmp_path / 'run' / 'src' / 'vllm').resolve()}" in log


def test_tune_moe_refuses_clearly_on_cpu(tmp_path):
    with pytest.raises(NotSupported, match="needs a GPU"):
        LocalSandbox(tmp_path).tune_moe(Candidate(framework="vllm"), tmp_path)


def test_a_resumed_run_s_wall_clock_counts_the_time_already_spent(tmp_path):
    # `agent resume` restores the ground clock from the ledger (agent/run.py), so a time budget
    # is not granted again in full; a real node's clock is wall time since the sandbox opened
    sb = LocalSandbox(tmp_path)
    assert 0 <= sb.elapsed_s() < 60
    sb.restore_ground({"elapsed_s": 3600.0})
    assert 3600 <= sb.elapsed_s() < 3660 and sb.ground_state()["elapsed_s"] >= 3600


def test_a_candidate_of_other_weights_than_the_checkpoint_s_is_refused_before_launch(tmp_path, fake_python):
    # served from the one checkpoint, an mxfp4 candidate would be the fp8 model measured as mxfp4
    (tmp_path / "config.json").write_text('{"quantization_config": {"quant_method": "fp8"}}')
    sb = LocalSandbox(tmp_path, python=fake_python)
    assert sb.weights == ("fp8",)
    with pytest.raises(NotSupported, match=rf"mxfp4 weights need a checkpoint of their own \(--model-path "
                                           rf"mxfp4=DIR\); this run has fp8 at {tmp_path}"):
        sb.launch(Candidate(framework="vllm", weights="mxfp4"), tmp_path / "r")
    assert not (tmp_path / "r").exists()  # nothing started
    assert LocalSandbox(tmp_path / "no-config").weights is None  # not known: not restricted


def test_with_a_checkpoint_per_precision_each_candidate_is_served_from_its_own(tmp_path, fake_python):
    # --model-path bf16=DIR --model-path fp8=DIR2: the precision phase on a real node
    bf16, fp8 = tmp_path / "glm", tmp_path / "glm-fp8"
    for d, cfg in ((bf16, "{}"), (fp8, '{"quantization_config": {"quant_method": "fp8"}}')):
        d.mkdir()
        (d / "config.json").write_text(cfg)
    sb = LocalSandbox(fp8, python=fake_python, ready_timeout_s=30, checkpoints={"fp8": fp8, "bf16": bf16})
    assert sb.weights == ("bf16", "fp8")  # most bytes first: the planner's baseline is bf16
    for w, d in (("fp8", fp8), ("bf16", bf16)):
        with sb.launch(Candidate(framework="vllm", weights=w), tmp_path / f"run-{w}") as s:
            assert f"--model={d} " in s.log_text()
    with pytest.raises(NotSupported, match=rf"mxfp4 weights need .* this run has bf16 at {bf16}, fp8 at {fp8}"):
        sb.launch(Candidate(framework="vllm", weights="mxfp4"), tmp_path / "r")
