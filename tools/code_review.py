"""Which parts of a candidate can run code of someone's choosing, and so need a human's review
like a patch does. Pure: `risky_items(candidate)` -> the items, each with the reason.

An environment variable passes only when it is on the allow-list of known-safe names (device
selection, thread counts, logging, the frameworks' tuning knobs) and its value names no code:
LD_PRELOAD, PYTHONPATH, PATH and any name not listed load or find code, so they are reviewed.
A flag passes when its value is a number or a switch, or a string / JSON that names no code and its
name is not one that loads code (vLLM's --model-loader-extra-config, --worker-cls, plugin,
trust-remote-code, logits-processor flags, ...). Strings name code when they are a path to a .py /
.so / .pth file or a dotted import path (`pkg.module:Class`); JSON values are searched through,
and keys like "module" or "class" mark them too.
"""
from __future__ import annotations

import re

# Exact names known to be safe: they pick devices, size thread pools or logs, or point the
# framework at tuned-config folders (data read as JSON/CSV, never imported).
SAFE_ENV = frozenset({
    "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TOKENIZERS_PARALLELISM", "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY",
    "SGLANG_MOE_CONFIG_DIR", "VLLM_TUNED_CONFIG_FOLDER", "AITER_CONFIG_FMOE", "TZ", "LANG", "LC_ALL",
})
# Prefixes of the frameworks' and collectives' tuning variables; names with a risky word inside
# (NCCL_NET_PLUGIN loads a shared object, VLLM_PLUGINS imports modules) are still reviewed.
SAFE_ENV_PREFIXES = ("VLLM_", "SGLANG_", "AITER_", "ATOM_", "NCCL_", "RCCL_", "HSA_", "GPU_MAX_HW_QUEUES")
RISKY_ENV_WORD = re.compile(r"PRELOAD|PLUGIN|PYTHON|LIBRARY|LIB_PATH|(^|_)PATH$|MODULE|HOOK|STARTUP|"
                            r"EXTENSION|_CLS$|CLASS|LOADER|IMPORT|EXEC|CMD|COMMAND|SCRIPT", re.I)
# Flags whose purpose is to load code (any value but "off").
RISKY_FLAG_WORD = re.compile(r"plugin|remote-code|loader-extra-config|-cls$|worker-extension|extension-cls|"
                             r"logits?-processor|middleware|custom-logit|module|import|hook|callback|"
                             r"python|-script", re.I)
CODE_KEYS = frozenset({"module", "class", "cls", "class_name", "qualname", "plugin", "plugins", "loader",
                       "factory", "callable", "import", "entrypoint", "entry_point", "script", "hook",
                       "worker_cls", "worker_extension_cls", "function", "func"})
_CODE_FILE = re.compile(r"\.(py|pyc|pyw|so|dylib|dll|pth|sh|pl|rb|js)(\W|$)", re.I)
_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?$|^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def names_code(value: object) -> str | None:
    """Why this value names code (None: it does not)."""
    if value is None or isinstance(value, (bool, int, float)):
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            if str(k).lower() in CODE_KEYS and v not in (None, False, "", [], {}):
                return f"JSON key {k!r} names code"
            why = names_code(v)
            if why:
                return why
        return None
    if isinstance(value, (list, tuple)):
        return next((w for w in map(names_code, value) if w), None)
    s = str(value).strip()
    if _CODE_FILE.search(s):
        return f"{s[:80]!r} is a path to code"
    if _DOTTED.match(s) and not re.fullmatch(r"[\d.]+", s):
        return f"{s[:80]!r} looks like a Python import path"
    return None


def env_risk(name: str, value: str) -> str | None:
    safe = name in SAFE_ENV or (name.startswith(SAFE_ENV_PREFIXES) and not RISKY_ENV_WORD.search(name))
    if not safe:
        return f"environment variable {name} is not on the allow-list of known-safe variables"
    return names_code(value)


def flag_risk(name: str, value: object) -> str | None:
    if value is None or value is False:
        return None  # the flag is left out
    if RISKY_FLAG_WORD.search(name):
        return f"flag {name} loads code"
    return names_code(value)


def item_key(kind: str, name: str, value: object) -> str:
    """The identity a human approves: kind, name and exact value (another value is a new review)."""
    import json
    return f"{kind} {name}={json.dumps(value, sort_keys=True, default=str)}"


def risky_items(candidate) -> list[tuple[str, str]]:
    """(item key, reason) for every env variable and flag of the candidate that needs review."""
    out = []
    for k, v in sorted(candidate.env.items()):
        why = env_risk(k, v)
        if why:
            out.append((item_key("env", k, v), why))
    for k, v in sorted(candidate.flags.items()):
        why = flag_risk(k, v)
        if why:
            out.append((item_key("flag", k, v), why))
    return out
