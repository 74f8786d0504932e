"""The environment a local server gets (issue 13 item 9): what it needs to find its runtime,
devices, caches and the framework's own knobs, and nothing else. Pure.

The agent's own environment holds OPENAI_API_KEY (for the LLM planner) and whatever else the user
exported; a server inherits none of it: its log would carry it, and a patched framework could
send it anywhere. Names are kept by an allow-list, and any name that reads like a credential is
dropped even when a prefix allows it (HF_TOKEN, NCCL_..._KEY).
"""
from __future__ import annotations

import re
from typing import Mapping

KEEP = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM",
                  "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHOME",
                  "CUDA_HOME", "ROCM_PATH", "HIP_PATH", "XDG_CACHE_HOME", "TRANSFORMERS_CACHE",
                  "HF_HOME", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "OMP_NUM_THREADS",
                  "MKL_NUM_THREADS", "TOKENIZERS_PARALLELISM"})
KEEP_PREFIXES = ("LC_", "CUDA_", "HIP_", "ROCR_", "ROCM_", "HSA_", "NCCL_", "RCCL_", "VLLM_", "SGLANG_",
                 "AITER_", "ATOM_", "TORCH_", "PYTORCH_", "TRITON_", "NVIDIA_", "GPU_", "KMP_")
SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)


def server_env(environ: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items()
            if (k in KEEP or k.startswith(KEEP_PREFIXES)) and not SECRET.search(k)}
