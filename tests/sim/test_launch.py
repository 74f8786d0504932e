"""Issue 2, acceptance 2: the story's failures emerge from state, with their log lines; the right
patch (a real diff applied with git to the run's source tree) removes them; a wrong one does not."""
import pytest

from sandboxes.sim import SimSandbox
from sandboxes.sim.frameworks import MULTI_STEP_CUH, NEXTN_FILE, ATOM_SPARSE_MLA
from tests.sim.conftest import git_apply, make_diff, story_candidate
from tools.candidate import Candidate, Parallel
from tools.protocols import LaunchFailure

RIGHT_MAPPER = ('"model.layers.61.": "model.decoder.",',
                '"model.layers.61.": "model.decoder.",\n'
                '        "model.layers.78.eh_proj": "model.eh_proj",\n'
                '        "model.layers.78.enorm": "model.enorm",\n'
                '        "model.layers.78.hnorm": "model.hnorm",\n'
                '        "model.layers.78.shared_head": "model.shared_head",\n'
                '        "model.layers.78.": "model.decoder.",')
RIGHT_GUARD = ("#include <cuda_runtime.h>\n",
               "#ifdef USE_ROCM\n#include <hip/hip_runtime.h>\n#else\n#include <cuda_runtime.h>\n#endif\n")


def launch_fails(sim, cand, tmp_path):
    with pytest.raises(LaunchFailure) as e:
        sim.launch(cand, tmp_path)
    return e.value


def test_mtp_shape_mismatch_then_right_patch_fixes(sim, tmp_path):
    f = launch_fails(sim, story_candidate(), tmp_path)
    assert f.diagnosis.kind == "shape_mismatch"
    assert f.diagnosis.details["param"] == "model.eh_proj.weight"
    assert f.diagnosis.details["expected"] == [6144, 6144] and f.diagnosis.details["got"] == [6144, 12288]
    assert "model.layers.78.eh_proj.weight" in f.excerpt and f.log_path.is_file()
    tree = sim.source_tree("sglang", tmp_path)
    git_apply(tree, make_diff(tree, NEXTN_FILE, *RIGHT_MAPPER))
    # The next failure of the story appears: depth 5 needs the fused kernel, not ROCm-guarded.
    f2 = launch_fails(sim, story_candidate(), tmp_path)
    assert f2.diagnosis.kind == "compile_error"
    assert f2.diagnosis.details["file"] == MULTI_STEP_CUH
    assert f2.diagnosis.details["missing_header"] == "cuda_runtime.h"
    assert f2.diagnosis.details["line"] == 6 and f2.diagnosis.details["col"] == 10
    git_apply(tree, make_diff(tree, MULTI_STEP_CUH, *RIGHT_GUARD))
    server = sim.launch(story_candidate(), tmp_path)
    assert "The server is fired up and ready to roll!" in server.log_text()


@pytest.mark.parametrize("wrong", [
    ('"model.layers.61.": "model.decoder.",', '"model.layers.78.": "model.decoder.",'),  # block only
    ('"model.layers.61.": "model.decoder.",', '"model.layers.61.": "model.decoder.",\n        "model.layers.78.eh_proj": "model.eh_proj",'),
])
def test_wrong_mapper_patch_does_not_fix(sim, tmp_path, wrong):
    tree = sim.source_tree("sglang", tmp_path)
    git_apply(tree, make_diff(tree, NEXTN_FILE, *wrong))
    f = launch_fails(sim, story_candidate(), tmp_path)
    assert f.diagnosis.kind == "shape_mismatch"


def test_deepseek_existing_entry_is_wrong_for_eh_proj(tmp_path):
    sim = SimSandbox("deepseek-v3", "mi355x")
    f = launch_fails(sim, story_candidate(), tmp_path)
    assert f.diagnosis.details["param"] == "model.eh_proj.weight"
    assert f.diagnosis.details["got"] == [7168, 14336]


@pytest.mark.parametrize("wrong", [
    ("#include <stdint.h>\n", "#ifdef USE_ROCM\n#include <hip/hip_runtime.h>\n#else\n#include <stdint.h>\n#endif\n"),
    ("#include <cuda_runtime.h>\n", "#ifndef USE_ROCM\n#include <hip/hip_runtime.h>\n#else\n#include <cuda_runtime.h>\n#endif\n"),
    ("#include <cuda_runtime.h>\n", ""),  # deleting the include leaves cudaStream_t & co undefined
])
def test_wrong_guard_does_not_fix(sim, tmp_path, wrong):
    tree = sim.source_tree("sglang", tmp_path)
    git_apply(tree, make_diff(tree, NEXTN_FILE, *RIGHT_MAPPER))
    git_apply(tree, make_diff(tree, MULTI_STEP_CUH, *wrong))
    f = launch_fails(sim, story_candidate(), tmp_path)
    assert f.diagnosis.kind == "compile_error"


def test_depth_three_needs_no_fused_kernel(sim, tmp_path):
    tree = sim.source_tree("sglang", tmp_path)
    git_apply(tree, make_diff(tree, NEXTN_FILE, *RIGHT_MAPPER))
    flags = {**story_candidate().flags, "--speculative-num-steps": 3, "--speculative-num-draft-tokens": 4}
    assert sim.launch(story_candidate(flags=flags), tmp_path)


def test_cuda_compiles_the_kernel_fine(tmp_path):
    sim = SimSandbox("glm-5.2", "b300")
    tree = sim.source_tree("sglang", tmp_path)
    git_apply(tree, make_diff(tree, NEXTN_FILE, *RIGHT_MAPPER))
    flags = {k: v for k, v in story_candidate().flags.items() if k != "--enable-aiter-allreduce-fusion"}
    assert sim.launch(story_candidate(flags=flags), tmp_path)


def test_vllm_cannot_load_mxfp4_glm(sim, tmp_path):
    f = launch_fails(sim, Candidate(framework="vllm", weights="mxfp4", parallel=Parallel(tp=8)), tmp_path)
    assert f.diagnosis.kind == "unsupported_quant"
    assert f.diagnosis.details["arch"] == "GlmMoeDsaForCausalLM"
    # FP8 weights load on vLLM
    assert sim.launch(Candidate(framework="vllm", weights="fp8", parallel=Parallel(tp=8)), tmp_path)


def test_bad_flags_fail_like_argparse(sim, tmp_path):
    f = launch_fails(sim, story_candidate(flags={"--no-such-flag": "1"}), tmp_path)
    assert f.diagnosis.kind == "bad_flag" and "unrecognized arguments: --no-such-flag" in f.excerpt
    f = launch_fails(sim, story_candidate(flags={"--kv-cache-dtype": "fp9"}), tmp_path)
    assert f.diagnosis.kind == "bad_flag" and f.diagnosis.details["value"] == "fp9"


def test_oom_when_weights_do_not_fit(tmp_path):
    sim = SimSandbox("glm-5.2", "mi355x")
    f = launch_fails(sim, Candidate(framework="sglang", weights="bf16", parallel=Parallel(tp=4, dp=2)), tmp_path)
    assert f.diagnosis.kind == "oom"


def test_moe_fallback_warning_exactly_when_no_tuned_config(sim, tmp_path):
    c = story_candidate(flags={"--kv-cache-dtype": "fp8_e4m3"})
    log = sim.launch(c, tmp_path).log_text()
    assert "[fused_moe] using 2stage default for" in log  # aiter ships no mxfp4 tables
    diags = [d.kind for d in __import__("tools.frameworks", fromlist=["get"]).get("sglang").diagnose(log)]
    assert "moe_default_config" in diags
    files = sim.tune_moe(c, tmp_path)
    assert files and files[0].name == "tuned_fmoe.csv"
    from tools import frameworks, moe
    tuned = moe.install(c, files, frameworks.get("sglang"))
    assert tuned.env == {**c.env, "AITER_CONFIG_FMOE": str(files[0].resolve())}
    log2 = sim.launch(tuned, tmp_path).log_text()
    assert "using 2stage default" not in log2 and "kernelName1='flydsl_moe1_afp4_wfp4" in log2
    # aiter reads its table through AITER_CONFIG_FMOE only: listed, or under sglang's folder of
    # Triton configs (what tools/moe.install set before 2026-12-06), it is never read
    for env in ({}, {"SGLANG_MOE_CONFIG_DIR": str(files[0].resolve())}):
        unread = c.model_copy(update={"moe_configs": tuned.moe_configs, "env": {**c.env, **env}})
        assert "[fused_moe] using 2stage default for" in sim.launch(unread, tmp_path).log_text()
    # fp8 weights: aiter's shipped a8w8 table already covers GLM-5.2's shapes
    log3 = sim.launch(c.model_copy(update={"weights": "fp8"}), tmp_path).log_text()
    assert "using 2stage default" not in log3
    # a table tuned for TP4 shapes does not match TP8 shapes
    c8 = tuned.model_copy(update={"parallel": Parallel(tp=8)})
    assert "using 2stage default" in sim.launch(c8, tmp_path).log_text()


def test_triton_json_on_nvidia(tmp_path):
    sim = SimSandbox("glm-5.2", "b300")
    c = Candidate(framework="sglang", weights="fp8", parallel=Parallel(tp=8), flags={})
    log = sim.launch(c, tmp_path).log_text()
    assert "Using default MoE kernel config. Performance might be sub-optimal! Config file not found at" in log
    files = sim.tune_moe(c, tmp_path)
    assert files[0].name == "E=256,N=256,device_name=NVIDIA_B300,dtype=fp8_w8a8,block_shape=[128, 128].json"
    from tools import frameworks, moe
    tuned = moe.install(c, files, frameworks.get("sglang"))
    assert tuned.env == {"SGLANG_MOE_CONFIG_DIR": str(files[0].parent.resolve())}  # Triton: a folder
    log = sim.launch(tuned, tmp_path).log_text()
    assert f"Using MoE kernel config from {files[0]}." in log


def test_tuning_and_launches_cost_simulated_time(sim, tmp_path):
    t0 = sim.elapsed_s()
    c = story_candidate(flags={"--kv-cache-dtype": "fp8_e4m3"})
    sim.launch(c, tmp_path)
    t1 = sim.elapsed_s()
    sim.tune_moe(c, tmp_path)
    assert 60 < t1 - t0 < 900 and sim.elapsed_s() - t1 > 600


def test_atom_indexer_window_is_read_from_its_tree(sim, tmp_path):
    s = sim.launch(Candidate(framework="atom", weights="mxfp4", parallel=Parallel(tp=8)), tmp_path)
    assert s.client.skill.indexer_window == 8192
    tree = sim.source_tree("atom", tmp_path)
    git_apply(tree, make_diff(tree, ATOM_SPARSE_MLA, "MAX_INDEXER_KEYS = 8192", "MAX_INDEXER_KEYS = 262144"))
    s = sim.launch(Candidate(framework="atom", weights="mxfp4", parallel=Parallel(tp=8)), tmp_path)
    assert s.client.skill.indexer_window == 262144


def test_sim_obeys_the_protocols(sim, tmp_path):
    from tools.protocols import Client, Sandbox, Server
    s = sim.launch(story_candidate(flags={"--kv-cache-dtype": "fp8_e4m3"}), tmp_path)
    assert isinstance(sim, Sandbox) and isinstance(s, Server) and isinstance(s.client, Client)
    assert s.url is None and sim.name == "sim"
    with s as srv:
        assert srv.log_text() == s.log_path.read_text()


def test_moe_configs_found_through_the_frameworks_env_vars(tmp_path):
    sim = SimSandbox("glm-5.2", "mi355x")
    c = story_candidate(flags={"--kv-cache-dtype": "fp8_e4m3"})
    (csv,) = sim.tune_moe(c, tmp_path)
    log = sim.launch(c.model_copy(update={"env": {"AITER_CONFIG_FMOE": str(csv)}}), tmp_path).log_text()
    assert "using 2stage default" not in log
    nv = SimSandbox("glm-5.2", "b300")
    cn = Candidate(framework="sglang", weights="fp8", parallel=Parallel(tp=8))
    (js,) = nv.tune_moe(cn, tmp_path)
    log = nv.launch(cn.model_copy(update={"env": {"SGLANG_MOE_CONFIG_DIR": str(js.parent)}}), tmp_path).log_text()
    assert f"Using MoE kernel config from {js}." in log
    js.write_text("{not json")  # a broken file is no config: the framework falls back
    log = nv.launch(cn.model_copy(update={"env": {"SGLANG_MOE_CONFIG_DIR": str(js.parent)}}), tmp_path).log_text()
    assert "Using default MoE kernel config" in log


def test_runs_are_noisy_but_seeded(tmp_path):
    import asyncio
    from tools.bench.metrics import summarize
    from tools.bench.workload import Workload, schedule
    specs = schedule(Workload(), n=60, rate=1.0, seed=0)

    def tok_s(seed):
        s = SimSandbox("glm-5.2", "mi355x", seed=seed).launch(story_candidate(flags={"--kv-cache-dtype": "fp8_e4m3"}), tmp_path)
        return [summarize(asyncio.run(s.client.run(specs))).tpot_p50_s for _ in range(3)]

    a, b = tok_s(1), tok_s(1)
    assert a == b  # same seed, same numbers
    assert len(set(a)) == 3  # repeats on one server differ (run-to-run noise)
