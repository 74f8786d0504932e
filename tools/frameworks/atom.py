"""ATOM (ROCm/ATOM, `python -m atom.entrypoints.openai_server`): a vLLM-like engine on aiter.

Its HTTP port is `--server-port` (`--port` is an internal engine port). Flags are accepted in
kebab or snake case. No `--quantization`: the method is read from the checkpoint.
"""
from __future__ import annotations

from tools.frameworks.base import F, Framework
from tools.frameworks.vllm import VLLM


class Atom(Framework):
    name = "atom"
    ready_line = "Server started successfully and ready to accept requests"
    moe_config_env = "AITER_CONFIG_FMOE"  # aiter's tuned fused-MoE CSV (tuned_fmoe.csv)
    module = "atom.entrypoints.openai_server"
    prog = "openai_server.py"
    port_flag = "--server-port"
    served_name_flag = None  # serves the model under its path
    snake_case_ok = True
    flag_table = [
        F("--model", "str"), F("--host", "str"),
        F("--server-port", "int", default=8000, help="HTTP port of the OpenAI server"),
        F("--port", "int", default=8006, help="internal engine port"),
        F("--tensor-parallel-size", "int", "-tp", default=1),
        F("--data-parallel-size", "int", "-dp", default=1),
        F("--enable-expert-parallel", "bool"),
        F("--enable-dp-attention", "bool"),
        F("--kv_cache_dtype", "str", choices=["bf16", "fp8"], default="bf16",
          search={"choices": ["bf16", "fp8"]}),
        F("--max-num-batched-tokens", "int", default=16384, search={"low": 4096, "high": 65536, "log": True}),
        F("--max-num-seqs", "int", default=512, search={"low": 8, "high": 1024, "log": True}),
        F("--max-model-len", "int"),
        F("--gpu-memory-utilization", "float", default=0.9, search={"low": 0.80, "high": 0.95}),
        F("--block-size", "int"),
        F("--cudagraph-mode", "str"),
        F("--enforce-eager", "bool"),
        F("--method", "str", help="speculative method: mtp, eagle3, ..."),
        F("--num-speculative-tokens", "int", search={"low": 1, "high": 4}),
        F("--trust-remote-code", "bool"),
    ]

    # ATOM takes vLLM's parallel flags (it is a vLLM-like engine)
    parallel_args = VLLM.parallel_args
    parallel_flag_names = VLLM.parallel_flag_names
