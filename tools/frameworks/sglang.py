"""sglang (`python -m sglang.launch_server`): flags from the schema of the chosen version
(sglang/srt/server_args.py, ServerArgs.add_cli_args; 0.5.12 and 0.5.23 ship), plus the project's
annotations. Plain argparse: prefixes are accepted (`--tp 8`), underscores are not.
"""
from __future__ import annotations

import re

from tools.candidate import Candidate
from tools.frameworks.versioned import VersionedFramework


# sglang's CPU engine (checked on 0.5.23 serving the CPU testbed, 2026-12-01): is_cpu() is true only
# with SGLANG_USE_CPU_ENGINE=1; the CUDA graph/flashinfer/triton paths need a GPU, so attention and
# sampling take the plain-torch backends, the overlap scheduler is off, and --sleep-on-idle keeps the
# idle scheduler from spinning a core (it does, without it).
CPU_FLAGS = {"--device": "cpu", "--attention-backend": "torch_native", "--sampling-backend": "pytorch",
             "--disable-overlap-schedule": True, "--sleep-on-idle": True}
CPU_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}


class SGLang(VersionedFramework):
    name = "sglang"
    ready_line = "The server is fired up and ready to roll!"
    moe_config_env = "SGLANG_MOE_CONFIG_DIR"
    module = "sglang.launch_server"
    model_flag = "--model-path"
    annotations = {
        "--speculative-num-steps": {"search": {"low": 1, "high": 6}},
        "--speculative-eagle-topk": {"search": {"choices": [1, 2, 4]}},
        "--speculative-num-draft-tokens": {"search": {"low": 2, "high": 8}},
        "--kv-cache-dtype": {"search": {"choices": ["auto", "fp8_e4m3"]}},
        "--mem-fraction-static": {"search": {"low": 0.70, "high": 0.95}},
        "--chunked-prefill-size": {"search": {"choices": [-1, 2048, 4096, 8192, 16384]}},
        "--max-running-requests": {"search": {"low": 8, "high": 1024, "log": True}},
        "--max-prefill-tokens": {"search": {"low": 4096, "high": 65536, "log": True}},
        "--disable-radix-cache": {"search": {"choices": [False, True]}, "defeats": (True, "prefix_reuse")},
        # 0.5.12's one CUDA-graph batch bound; 0.5.23 split it, and decode is what it bounded.
        "--cuda-graph-max-bs": {"search": {"low": 8, "high": 512, "log": True}},
        "--cuda-graph-max-bs-decode": {"search": {"low": 8, "high": 512, "log": True}},
        "--enable-aiter-allreduce-fusion": {"search": {"choices": [False, True]}, "vendors": ["amd"]},
        # Spellings the rest of the project uses, so they are the canonical names.
        "--tp-size": {}, "--dp-size": {}, "--ep-size": {}, "--model-path": {},
        "--speculative-algorithm": {}, "--enable-dp-attention": {}, "--disable-cuda-graph": {},
    }
    renames = {"--cuda-graph-max-bs": ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"),
               "--cuda-graph-max-bs-decode": ("--cuda-graph-max-bs",)}

    def platform_flags(self, vendor: str | None) -> dict:
        """Flags this host kind needs before any tuning (only those this version's parser has)."""
        return {k: v for k, v in CPU_FLAGS.items() if k in self.flags} if vendor == "cpu" else {}

    def platform_env(self, vendor: str | None) -> dict:
        return dict(CPU_ENV) if vendor == "cpu" else {}

    @property
    def prog(self) -> str:  # the program name argparse prints in its errors
        return self.schema.get("prog") or "launch_server.py"

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

    def spec_algorithms(self) -> list[str]:
        """0.5.12 lists the algorithms as choices; 0.5.23 takes a free string whose builtins its
        help names (EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, ...)."""
        s = self.flags.get("--speculative-algorithm")
        if s is None:
            return []
        if s.choices:
            return list(s.choices)
        m = re.search(r"Builtins: ([A-Z0-9_, ]+)", s.help)
        return [a.strip() for a in m.group(1).split(",") if a.strip()] if m else []
