"""Log signatures -> Diagnosis, table-driven over real-format log lines."""
import pytest

from tools.frameworks import get
from tools.frameworks.signatures import diagnose, primary

AITER_DEFAULT = ("[aiter] [fused_moe] using 2stage default for (256, 32, 6144, 2048, 257, 9, 'ActivationType.Silu', "
                 "'torch.bfloat16', 'torch.float4_e2m1fn_x2', 'torch.float4_e2m1fn_x2', 'QuantType.per_1x32', True, False) ")

CASES = [
    # (log line, kind, fatal, expected subset of details)
    ("WARNING 11-29 20:01:02 [fused_moe.py:727] Using default MoE config. Performance might be sub-optimal! "
     "Config file not found at /v/configs/E=256,N=512,device_name=AMD_Instinct_MI355X,dtype=fp8_w8a8,"
     "block_shape=[128,128].json", "moe_default_config", False,
     {"backend": "triton", "E": 256, "N": 512, "device_name": "AMD_Instinct_MI355X", "dtype": "fp8_w8a8",
      "block_shape": [128, 128]}),
    ("[2026-11-29 20:01:02 TP0] Using default MoE kernel config. Performance might be sub-optimal! Config file "
     "not found at /s/configs/triton_3_4_0/E=257,N=256,device_name=AMD_Instinct_MI355X.json, you can create "
     "them with https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton",
     "moe_default_config", False,
     {"path": "/s/configs/triton_3_4_0/E=257,N=256,device_name=AMD_Instinct_MI355X.json", "E": 257, "N": 256}),
    (AITER_DEFAULT, "moe_default_config", False,
     {"backend": "aiter", "keys": {"cu_num": 256, "token": 32, "model_dim": 6144, "inter_dim": 2048, "expert": 257,
                                   "topk": 9, "act_type": "ActivationType.Silu", "dtype": "torch.bfloat16",
                                   "q_dtype_a": "torch.float4_e2m1fn_x2", "q_dtype_w": "torch.float4_e2m1fn_x2",
                                   "q_type": "QuantType.per_1x32", "use_g1u1": True, "doweight_stage1": False}}),
    ("[aiter] [fused_moe] using 2stage (kernelName1='flydsl_moe1_afp4_wfp4_bf16_t32x128x256', kernelName2='k2') "
     "for (256, 32, 6144, 2048, 257, 9, 'ActivationType.Silu', 'torch.bfloat16', 'a', 'w', 'q', True, False) ",
     "moe_tuned_config", False,
     {"backend": "aiter", "kernels": {"kernelName1": "flydsl_moe1_afp4_wfp4_bf16_t32x128x256", "kernelName2": "k2"}}),
    ("INFO 11-29 [fused_moe.py:700] Using configuration from /t/E=8,N=14336,device_name=NVIDIA_H200.json for MoE layer.",
     "moe_tuned_config", False, {"path": "/t/E=8,N=14336,device_name=NVIDIA_H200.json", "E": 8, "N": 14336}),
    ("[2026-11-29 TP0] Using MoE kernel config from /c/E=257,N=256,device_name=AMD_Instinct_MI355X.json.",
     "moe_tuned_config", False, {"path": "/c/E=257,N=256,device_name=AMD_Instinct_MI355X.json"}),
    ("RuntimeError: Error(s) in loading state_dict for MTP: size mismatch for model.layers.78.eh_proj.weight: "
     "copying a param with shape torch.Size([6144, 12288]) from checkpoint, the shape in current model is "
     "torch.Size([6144, 6144]).", "shape_mismatch", True,
     {"param": "model.layers.78.eh_proj.weight", "layer": 78, "got": [6144, 12288], "expected": [6144, 6144]}),
    ("AssertionError: Attempted to load weight (torch.Size([6144, 12288])) into parameter (torch.Size([6144, 6144]))",
     "shape_mismatch", True, {"got": [6144, 12288], "expected": [6144, 6144]}),
    ("RuntimeError: shape mismatch while loading model.eh_proj.weight: parameter [6144, 6144] uint8 vs "
     "checkpoint [6144, 12288] bfloat16", "shape_mismatch", True,
     {"param": "model.eh_proj.weight", "expected": [6144, 6144], "expected_dtype": "uint8",
      "got": [6144, 12288], "got_dtype": "bfloat16"}),
    ("python/sglang/jit_kernel/csrc/spec/multi_step_metadata.cuh:12:10: fatal error: 'cuda_runtime.h' file not found",
     "compile_error", True, {"file": "python/sglang/jit_kernel/csrc/spec/multi_step_metadata.cuh", "line": 12,
                             "col": 10, "missing_header": "cuda_runtime.h"}),
    ("/tmp/build/kernel.cu:40:3: error: use of undeclared identifier 'foo'", "compile_error", True,
     {"file": "/tmp/build/kernel.cu", "line": 40, "col": 3, "message": "use of undeclared identifier 'foo'"}),
    ("csrc/x.cpp:5:10: fatal error: cuda_runtime.h: No such file or directory", "compile_error", True,
     {"missing_header": "cuda_runtime.h", "line": 5}),
    ("RuntimeError: Error building extension 'fused_mtp'", "compile_error", True, {"extension": "fused_mtp"}),
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 3.50 GiB. GPU 0 has a total capacity of "
     "287.98 GiB", "oom", True, {"tried": "3.50 GiB"}),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
     "initializing the engine.", "oom", True, {}),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "oom", True, {}),
    ("ValueError: The quantization method mxfp4 is not supported for the current GPU. Minimum capability: 90. "
     "Current capability: 80.", "unsupported_quant", True, {"method": "mxfp4"}),
    ("NotImplementedError: mxfp4 quantization is not supported for GlmMoeDsaForCausalLM", "unsupported_quant",
     True, {"method": "mxfp4", "arch": "GlmMoeDsaForCausalLM"}),
    ("api_server.py: error: unrecognized arguments: --max-num-sequences 8", "bad_flag", True,
     {"flags": ["--max-num-sequences"], "flag": "--max-num-sequences"}),
    ("launch_server.py: error: argument --speculative-algorithm: invalid choice: 'MTP' (choose from 'EAGLE', "
     "'EAGLE3', 'NEXTN')", "bad_flag", True,
     {"flag": "--speculative-algorithm", "value": "MTP", "choices": ["EAGLE", "EAGLE3", "NEXTN"]}),
    ("(Worker pid=30910) WARNING 12-03 09:38:01 [utils.py:597] Failed to create oneDNN linear, fallback to torch "
     "linear. Exception: could not create a primitive descriptor for the matmul primitive.",
     "cpu_gemm_fallback", False, {}),
    ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for "
     "the root cause.", "engine_dead", True, {}),
    ("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
     "engine_dead", True, {}),
    ("[2026-11-29 20:00:00] Received sigquit from a child process. It usually means the child failed.",
     "engine_dead", True, {}),
]


@pytest.mark.parametrize("line,kind,fatal,details", CASES)
def test_signature(line, kind, fatal, details):
    ds = diagnose("INFO some preamble\n" + line + "\nINFO trailing\n")
    assert len(ds) == 1, ds
    d = ds[0]
    assert (d.kind, d.fatal) == (kind, fatal)
    assert d.evidence == [line.rstrip()]
    for k, v in details.items():
        assert d.details.get(k) == v, (k, d.details)


def test_healthy_log_has_no_diagnosis():
    log = ("INFO:     Started server process [1234]\nINFO:     Waiting for application startup.\n"
           "INFO:     Application startup complete.\nINFO 127.0.0.1:5 - \"POST /v1/completions HTTP/1.1\" 200 OK\n")
    assert diagnose(log) == []


def test_vllm_assert_takes_param_name_from_nearby_lines():
    log = ("INFO loading weights\nDEBUG loading model.layers.61.enorm.weight\n"
           "AssertionError: Attempted to load weight (torch.Size([7168])) into parameter (torch.Size([3584]))\n")
    (d,) = diagnose(log)
    assert d.details["param"] == "model.layers.61.enorm.weight" and d.details["layer"] == 61
    assert d.details["got"] == [7168] and d.details["expected"] == [3584]


def test_repeated_warning_is_reported_once_and_primary_picks_the_cause():
    log = "\n".join([AITER_DEFAULT] * 3 + [
        "Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"])
    ds = diagnose(log)
    assert [d.kind for d in ds] == ["moe_default_config", "oom", "engine_dead"]
    assert primary(ds).kind == "oom"
    assert primary(ds[:1]) is None
    assert primary([ds[0], ds[2]]).kind == "engine_dead"


def test_every_adapter_diagnoses_the_same_catalogue():
    line = "x.cuh:3:10: fatal error: 'cuda_runtime.h' file not found"
    for fw in ("vllm", "sglang", "atom"):
        assert get(fw).diagnose(line)[0].details["missing_header"] == "cuda_runtime.h"
