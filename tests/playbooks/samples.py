"""A small valid playbook as plain data, for the loader tests to mutate."""
import copy

VALID = {
    "version": 1, "name": "glm-5.2-mi355x", "objective": "knee",
    "source": {"model": "glm-5.2", "hw": "mi355x", "trials": 30},
    "steps": [
        {"id": "s01", "kind": "framework", "phase": "framework", "baseline": True, "framework": "vllm",
         "weights": "bf16", "parallel": {"tp": "{gpus_per_node}", "dp": 1}},
        {"id": "s02", "kind": "framework", "phase": "framework", "framework": "sglang"},
        {"id": "s03", "kind": "weights", "phase": "precision", "weights": "mxfp4", "when": {"hw_compute": "fp4"}},
        {"id": "s04", "kind": "patch", "phase": "speculative", "when": {"has_mtp": True, "after_diagnosis": "shape_mismatch"},
         "flags": {"--speculative-algorithm": "NEXTN", "--speculative-num-steps": 3},
         "patches": [{"framework": "sglang", "fix": "mtp_prefix_alias", "params": {"layer": "{num_hidden_layers}"},
                      "files": ["python/sglang/srt/models/deepseek_nextn.py"]}]},
        {"id": "s05", "kind": "patch", "phase": "speculative", "when": {"vendor": ["amd"], "after_diagnosis": "compile_error"},
         "flags": {"--speculative-num-steps": 5},
         "patches": [{"framework": "sglang", "fix": "rocm_include_guard",
                      "params": {"file": "sgl-kernel/csrc/speculative/multi_step_metadata.cuh", "header": "cuda_runtime.h"}}]},
        {"id": "s06", "kind": "flags", "phase": "flags", "flags": {"--kv-cache-dtype": "fp8_e4m3"}},
        {"id": "s07", "kind": "flags", "phase": "flags", "flags": {"--enable-aiter-allreduce-fusion": True},
         "when": {"vendor": ["amd"]}},
        {"id": "s08", "kind": "parallel", "phase": "parallel", "parallel": {"tp": "{gpus_per_node//2}", "dp": 2}},
        {"id": "s09", "kind": "moe_tune", "phase": "moe", "when": {"is_moe": True, "after_diagnosis": "moe_default_config"},
         "moe": {"shape": {"E": "{n_routed_experts}", "N": "{moe_intermediate_size//4}", "K": "{hidden_size}"}}},
        {"id": "s10", "kind": "patch", "phase": "speculative",
         "patches": [{"framework": "sglang", "fix": "literal",
                      "diff": "--- a/python/x.py\n+++ b/python/x.py\n@@ -1 +1 @@\n-a\n+b\n"}]},
    ],
}


def valid() -> dict:
    return copy.deepcopy(VALID)
