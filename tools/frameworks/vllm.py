"""vLLM (`python -m vllm.entrypoints.openai.api_server`), flags as in vllm/engine/arg_utils.py.

vLLM's FlexibleArgumentParser accepts `--max_num_seqs` for `--max-num-seqs`, and its switches
are argparse.BooleanOptionalAction (`--no-enable-prefix-caching`).
"""
from __future__ import annotations

from tools.candidate import Candidate
from tools.frameworks.base import F, Framework

# As vLLM 0.32 (the testbed's) lists them in argparse (dumped from its parser, 2026-11-29).
KV_CACHE_DTYPES = ["auto", "bfloat16", "float16", "fp8", "fp8_ds_mla", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
                   "fp8_per_token_head", "int4_per_token_head", "int8_per_token_head", "nvfp4", "nvfp4_4over6",
                   "nvfp4_ds_mla", "turboquant_3bit_nc", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                   "turboquant_k8v4", "ultraquant_4bit"]
# Known methods. argparse does not restrict --quantization (vLLM checks it when the engine starts,
# which then dies: the `unsupported_quant` diagnosis), so this is information, not `choices`.
QUANTIZATIONS = ["aqlm", "awq", "deepspeedfp", "tpu_int8", "fp8", "ptpc_fp8", "fbgemm_fp8", "modelopt",
                 "modelopt_fp4", "marlin", "bitblas", "gguf", "gptq_marlin_24", "gptq_marlin",
                 "gptq_bitblas", "awq_marlin", "gptq", "compressed-tensors", "bitsandbytes", "hqq",
                 "experts_int8", "ipex", "quark", "moe_wna16", "torchao", "auto-round", "rtn", "inc",
                 "mxfp4", "petit_nvfp4"]
DTYPES = ["auto", "bfloat16", "float", "float16", "float32", "half"]


class VLLM(Framework):
    name = "vllm"
    ready_line = "Application startup complete."
    moe_config_env = "VLLM_TUNED_CONFIG_FOLDER"
    module = "vllm.entrypoints.openai.api_server"
    prog = "api_server.py"
    snake_case_ok = True
    # Real vLLM 0.32 words a bad JSON flag "Value {raw} cannot be converted to <function loads at
    # 0x...>."; kept at argparse's default wording until tests/sim/test_bad_input.py moves with it.
    flag_table = [
        F("--model", "str", help="model directory or hub name"),
        F("--served-model-name", "str", help="name the API serves the model under"),
        F("--host", "str"), F("--port", "int", default=8000),
        F("--tensor-parallel-size", "int", "-tp", default=1, help="GPUs per tensor-parallel group"),
        F("--data-parallel-size", "int", "-dp", default=1),
        F("--pipeline-parallel-size", "int", "-pp", default=1),
        F("--enable-expert-parallel", "bool", "-ep", negatable=True, default=False),
        F("--max-num-seqs", "int", default=None, help="max sequences per scheduler step",
          search={"low": 8, "high": 1024, "log": True}),
        F("--max-num-batched-tokens", "human_int", default=None, help="max tokens per scheduler step",
          search={"low": 512, "high": 65536, "log": True}),
        F("--max-model-len", "human_int_or_auto"),
        F("--gpu-memory-utilization", "float", "--device-memory-utilization", default=0.92,
          search={"low": 0.80, "high": 0.95}),
        F("--kv-cache-dtype", "str", choices=KV_CACHE_DTYPES, default="auto",
          search={"choices": ["auto", "fp8"]}),
        F("--quantization", "str", "-q", help="one of " + ", ".join(QUANTIZATIONS) + ", ..."),
        F("--dtype", "str", choices=DTYPES, default="auto"),
        # argparse's default is None; the V1 engine then turns prefix caching on: the effective default is on.
        F("--enable-prefix-caching", "bool", negatable=True, default=True, search={"choices": [True, False]},
          defeats=(False, "prefix_reuse")),
        F("--enable-chunked-prefill", "bool", negatable=True, search={"choices": [True, False]}),
        F("--enforce-eager", "bool", negatable=True, default=False),
        F("--speculative-config", "json", "-sc", help='e.g. {"method": "ngram", "num_speculative_tokens": 3, '
          '"prompt_lookup_max": 4}'),
        F("--compilation-config", "json", "-cc", help='e.g. {"cudagraph_mode": "FULL_AND_PIECEWISE"}'),
        F("--block-size", "int"),
        F("--trust-remote-code", "bool", negatable=True),
        F("--load-format", "str", default="auto"),
        F("--tokenizer", "str"),
        F("--seed", "int", default=0),
        F("--async-scheduling", "bool", negatable=True),
        F("--long-prefill-token-threshold", "int", default=0),
        F("--disable-log-stats", "bool"),
        F("--enable-log-requests", "bool", negatable=True),
        F("--uvicorn-log-level", "str", choices=["critical", "debug", "error", "info", "trace", "warning"]),
    ]

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
