"""ATOM (ROCm/ATOM, `python -m atom.entrypoints.openai_server`): a vLLM-like engine on aiter.
Flags from the schema read at a dated commit of ROCm/ATOM (the versions are the commit dates),
plus the project's annotations.

Its HTTP port is `--server-port` (`--port` is an internal engine port). Both kebab and snake
spellings of every flag are accepted only from 2026-07-23; before, each flag has the one spelling
its add_argument gave it (`--kv_cache_dtype`, `--max-num-seqs`). No `--quantization`: the method
is read from the checkpoint (or `--online_quant_config`).
"""
from __future__ import annotations

from tools.frameworks.versioned import VersionedFramework
from tools.frameworks.vllm import VLLM


class Atom(VersionedFramework):
    name = "atom"
    ready_line = "Server started successfully and ready to accept requests"
    moe_config_env = "AITER_CONFIG_FMOE"  # aiter's tuned fused-MoE CSV (tuned_fmoe.csv)
    module = "atom.entrypoints.openai_server"
    prog = "openai_server.py"
    port_flag = "--server-port"
    served_name_flag = None  # the launcher leaves the served name to the model path (flag only from 2026-07-27)
    annotations = {
        "--kv_cache_dtype": {"search": {"choices": ["bf16", "fp8"]}},
        "--max-num-batched-tokens": {"search": {"low": 4096, "high": 65536, "log": True}},
        "--max-num-seqs": {"search": {"low": 8, "high": 1024, "log": True}},
        "--gpu-memory-utilization": {"search": {"low": 0.80, "high": 0.95}},
        "--num-speculative-tokens": {"search": {"low": 1, "high": 4}},
        "--tensor-parallel-size": {}, "--data-parallel-size": {}, "--enable-expert-parallel": {},
        "--method": {}, "--enable-dp-attention": {}, "--model": {}, "--enforce-eager": {},
    }

    # ATOM takes vLLM's parallel flags (it is a vLLM-like engine)
    parallel_args = VLLM.parallel_args
    parallel_flag_names = VLLM.parallel_flag_names
