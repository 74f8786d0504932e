"""sglang (`python -m sglang.launch_server`), flags as in sglang/srt/server_args.py (0.5.8-0.5.23).

Plain argparse: switches are store_true, underscores are not accepted.
"""
from __future__ import annotations

from tools.candidate import Candidate
from tools.frameworks.base import F, Framework

KV_CACHE_DTYPES = ["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"]
QUANTIZATIONS = ["awq", "fp8", "gptq", "marlin", "gptq_marlin", "awq_marlin", "bitsandbytes", "gguf",
                 "modelopt", "modelopt_fp4", "petit_nvfp4", "w8a8_int8", "w8a8_fp8", "moe_wna16",
                 "qoq", "w4afp8", "mxfp4", "compressed-tensors", "quark_int4fp8_moe", "quark",
                 "quark_mxfp4", "blockwise_int8", "fbgemm_fp8"]
ATTENTION_BACKENDS = ["triton", "torch_native", "flex_attention", "nsa", "cutlass_mla", "fa3", "fa4",
                      "flashinfer", "flashmla", "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn",
                      "aiter", "wave", "intel_amx", "ascend"]
MOE_RUNNER_BACKENDS = ["auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm",
                       "flashinfer_cutlass", "flashinfer_mxfp4", "flashinfer_cutedsl", "cutlass", "aiter"]
SPEC_ALGOS = ["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]


class SGLang(Framework):
    name = "sglang"
    ready_line = "The server is fired up and ready to roll!"
    moe_config_env = "SGLANG_MOE_CONFIG_DIR"
    module = "sglang.launch_server"
    prog = "launch_server.py"
    model_flag = "--model-path"
    flag_table = [
        F("--model-path", "str", "--model"),
        F("--served-model-name", "str"), F("--tokenizer-path", "str"),
        F("--host", "str", default="127.0.0.1"), F("--port", "int", default=30000),
        F("--tp-size", "int", "--tensor-parallel-size", default=1),
        F("--dp-size", "int", "--data-parallel-size", default=1),
        F("--ep-size", "int", "--expert-parallel-size", default=1),
        F("--enable-dp-attention", "bool"),
        F("--speculative-algorithm", "str", choices=SPEC_ALGOS, help="NEXTN is an alias of EAGLE (MTP)"),
        F("--speculative-draft-model-path", "str"),
        F("--speculative-num-steps", "int", search={"low": 1, "high": 6}),
        F("--speculative-eagle-topk", "int", search={"choices": [1, 2, 4]}),
        F("--speculative-num-draft-tokens", "int", search={"low": 2, "high": 8}),
        F("--kv-cache-dtype", "str", choices=KV_CACHE_DTYPES, default="auto",
          search={"choices": ["auto", "fp8_e4m3"]}),
        F("--quantization", "str", choices=QUANTIZATIONS),
        F("--dtype", "str", choices=["auto", "half", "float16", "bfloat16", "float", "float32"]),
        F("--mem-fraction-static", "float", search={"low": 0.70, "high": 0.95}),
        F("--chunked-prefill-size", "int", help="-1 disables chunked prefill",
          search={"choices": [-1, 2048, 4096, 8192, 16384]}),
        F("--max-running-requests", "int", search={"low": 8, "high": 1024, "log": True}),
        F("--max-prefill-tokens", "int", default=16384, search={"low": 4096, "high": 65536, "log": True}),
        F("--page-size", "int", default=1),
        F("--context-length", "int"),
        F("--disable-radix-cache", "bool", search={"choices": [False, True]}, defeats=(True, "prefix_reuse")),
        F("--cuda-graph-max-bs", "int", search={"low": 8, "high": 512, "log": True}),
        F("--disable-cuda-graph", "bool"),
        F("--attention-backend", "str", choices=ATTENTION_BACKENDS),
        F("--moe-runner-backend", "str", choices=MOE_RUNNER_BACKENDS, default="auto"),
        F("--enable-aiter-allreduce-fusion", "bool", search={"choices": [False, True]}, vendors=["amd"]),
        F("--enable-torch-compile", "bool"),
        F("--enable-mixed-chunk", "bool"),
        F("--disable-overlap-schedule", "bool"),
        F("--schedule-policy", "str", choices=["lpm", "random", "fcfs", "dfs-weight", "lof", "priority"]),
        F("--schedule-conservativeness", "float", default=1.0),
        F("--num-continuous-decode-steps", "int", default=1),
        F("--trust-remote-code", "bool"),
        F("--load-format", "str"),
        F("--random-seed", "int"),
        F("--log-level", "str"),
    ]

    def parallel_args(self, c: Candidate) -> list[str]:
        # sglang's dp without dp-attention launches dp replicas of tp GPUs each (tp x dp GPUs);
        # expert parallelism spans the tp group of each replica.
        p = c.parallel
        out: list[str] = []
        if p.tp > 1:
            out += ["--tp-size", str(p.tp)]
        if p.dp > 1:
            out += ["--dp-size", str(p.dp)]
        if p.ep and p.tp > 1:
            out += ["--ep-size", str(p.tp)]
        return out

    def parallel_flag_names(self) -> set[str]:
        return {"--tp-size", "--dp-size", "--ep-size"}
