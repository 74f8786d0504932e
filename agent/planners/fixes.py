"""The catalogue of known fixes: a launch failure's Diagnosis (plus the model card, the hardware
and the framework's source tree) -> candidate fixes (a flag, an env variable, or a patch).

Patches are built by reading the file in this run's source tree and diffing the edit with difflib,
so they adapt to the tree and to the model (e.g. the MTP layer index is num_hidden_layers).
Log text is only ever matched as data; nothing in it is executed or obeyed.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from tools.candidate import Candidate
from tools.patch import source_files

# CUDA headers and their HIP counterparts (ROCm builds define USE_ROCM).
HIP_HEADERS = {"cuda_runtime.h": "hip/hip_runtime.h", "cuda.h": "hip/hip_runtime.h",
               "cuda_fp16.h": "hip/hip_fp16.h", "cuda_bf16.h": "hip/hip_bf16.h",
               "cuda_runtime_api.h": "hip/hip_runtime_api.h"}
MTP_MODULES = ("eh_proj", "enorm", "hnorm", "shared_head")


@dataclass
class Fix:
    name: str
    kind: str  # patch | flags | env
    why: str
    diff: str = ""
    files: list[str] = field(default_factory=list)
    title: str = ""
    flags: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)

    @property
    def key(self) -> str:
        body = self.diff or repr(sorted(self.flags.items())) + repr(sorted(self.env.items()))
        return f"{self.name}:{hashlib.sha256(body.encode()).hexdigest()[:12]}"


def unified(rel: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}"))


# ---- patch: MTP checkpoint prefix aliases (the Quark MXFP4 exclude list vs sglang's NextN names)
def _find_prefix_dict(src: str) -> ast.Dict | None:
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.keyword) and node.arg == "orig_to_new_prefix" and isinstance(node.value, ast.Dict):
            return node.value
    return None


def mtp_prefix_patch(tree: Path, layer: int) -> Fix | None:
    """Alias the checkpoint's `model.layers.{layer}.*` MTP names to the runtime names."""
    for path in source_files(Path(tree), "*nextn*.py"):
        src = path.read_text()
        d = _find_prefix_dict(src)
        if d is None:
            continue
        existing = {ast.literal_eval(k): ast.literal_eval(v) for k, v in zip(d.keys, d.values)}
        want = {f"model.layers.{layer}.{m}": f"model.{m}" for m in MTP_MODULES}
        want[f"model.layers.{layer}."] = "model.decoder."
        missing = {k: v for k, v in want.items() if existing.get(k) != v}
        if not missing:
            return None
        lines = src.splitlines(True)
        indent = re.match(r"\s*", lines[d.lineno - 1]).group(0) + "    "
        merged = {**existing, **missing}
        body = "{\n" + "".join(f'{indent}    "{k}": "{v}",\n' for k, v in merged.items()) + indent + "}"
        start = sum(len(x) for x in lines[:d.lineno - 1]) + _byte_col(lines[d.lineno - 1], d.col_offset)
        end = sum(len(x) for x in lines[:d.end_lineno - 1]) + _byte_col(lines[d.end_lineno - 1], d.end_col_offset)
        new = src[:start] + body + src[end:]
        rel = path.relative_to(tree).as_posix()
        return Fix(name="mtp_prefix_alias", kind="patch", diff=unified(rel, src, new), files=[rel],
                   title=f"alias MTP layer {layer} checkpoint names to the NextN module names",
                   why=f"MTP weights stored as model.layers.{layer}.* are looked up under other names, "
                       f"so their bf16 exclusions are missed and loading fails on a shape mismatch")
    return None


def _byte_col(line: str, col: int) -> int:
    """ast columns are UTF-8 byte offsets; convert to a str index."""
    return len(line.encode()[:col].decode(errors="ignore"))


# ---- patch: ROCm guard around a CUDA-only include ----------------------------------------
def rocm_guard_patch(tree: Path, rel: str, line_no: int | None, header: str) -> Fix | None:
    hip = HIP_HEADERS.get(header)
    p = (Path(tree) / rel)
    if hip is None or rel.startswith("/") or ".." in Path(rel).parts or not p.is_file():
        return None
    src = p.read_text()
    lines = src.splitlines(True)
    inc = re.compile(rf'^\s*#\s*include\s*[<"]{re.escape(header)}[>"]')
    def guarded(i: int) -> bool:  # already in the #else of a USE_ROCM guard (fixed here, or upstream)
        return i >= 2 and lines[i - 1].strip() == "#else" and hip in lines[i - 2]
    idx = [i for i, ln in enumerate(lines) if inc.match(ln) and not guarded(i)]
    if line_no is not None and 0 < line_no <= len(lines) and inc.match(lines[line_no - 1]) and not guarded(line_no - 1):
        idx = [line_no - 1]
    if not idx:
        return None
    i = idx[0]
    eol = "\n" if lines[i].endswith("\n") else ""
    block = ["#ifdef USE_ROCM\n", f"#include <{hip}>\n", "#else\n", lines[i] if eol else lines[i] + "\n",
             "#endif\n" if eol else "#endif"]
    new = "".join(lines[:i] + block + lines[i + 1:])
    return Fix(name="rocm_include_guard", kind="patch", diff=unified(rel, src, new), files=[rel],
               title=f"guard #include <{header}> for ROCm in {rel}",
               why=f"{rel}:{i + 1} includes the CUDA-only {header} with no ROCm guard; hipcc cannot find it")


# ---- the catalogue -----------------------------------------------------------------------
def fixes_for(diagnoses: list[dict], cand: Candidate, *, card, hw, tree: Path | None,
              framework) -> list[Fix]:
    """Known fixes for a failed launch (or a baseline that started and measured nothing), most
    specific first."""
    out: list[Fix] = []
    for d in diagnoses:
        kind, det = d["kind"], d.get("details") or {}
        if kind == "cpu_gemm_fallback":  # a warning, and why a server that started measured nothing
            if "--dtype" in framework.flags and cand.flags.get("--dtype") != "float32":
                out.append(Fix(name="float32_gemm", kind="flags", flags={"--dtype": "float32"},
                               why="every matmul took torch's slow fallback (this CPU has no bf16 instruction "
                                   "oneDNN can use); --dtype float32 runs on oneDNN"))
            continue
        if not d.get("fatal", True):
            continue
        if kind == "shape_mismatch" and tree is not None and getattr(card, "mtp_layers", 0) > 0 \
                and _speculative(cand):
            f = mtp_prefix_patch(tree, card.num_hidden_layers)
            if f:
                out.append(f)
        elif kind == "compile_error" and tree is not None and getattr(hw, "vendor", "") == "amd":
            header = det.get("missing_header") or ""
            if det.get("file") and Path(header).name in HIP_HEADERS:
                f = rocm_guard_patch(tree, det["file"], det.get("line"), Path(header).name)
                if f:
                    out.append(f)
        elif kind == "missing_module" and tree is not None and det.get("file"):
            from agent.planners.import_guard import guard_patch
            g = guard_patch(tree, framework.name, det["module"].split(".")[0], det["file"], unified)
            if g:
                title, why, diff, files = g
                out.append(Fix(name="guard_optional_import", kind="patch", diff=diff, files=files,
                               title=title, why=why))
        elif kind == "bad_flag":
            bad = det.get("flag")
            if bad and bad in cand.flags:
                out.append(Fix(name="drop_bad_flag", kind="flags", flags={bad: None},
                               why=f"the CLI rejected {bad}; retry without it"))
        elif kind == "startup_memory" and det.get("free_fraction"):
            # Another process holds memory: ask for what is free, with a margin, rounded down to a
            # number a person would type. Only vLLM's flag means this (sglang's fraction is of the total).
            flag = "--gpu-memory-utilization"
            value = math.floor(det["free_fraction"] * 0.95 * 20) / 20
            if flag in framework.flags and value >= 0.05 and value < float(cand.flags.get(flag) or det["requested"]):
                out.append(Fix(name="less_memory_utilization", kind="flags", flags={flag: value},
                               why=f"only {det['free_gib']} of {det['total_gib']} GiB were free at startup "
                                   f"({det['requested']} requested); retry with {flag} {value}"))
        elif kind == "oom":
            text = " ".join(d.get("evidence") or [])
            for flag, value in (("--mem-fraction-static", 0.9), ("--gpu-memory-utilization", 0.95)):
                if flag in framework.flags and "increase" in text and cand.flags.get(flag) != value:
                    out.append(Fix(name="more_memory_fraction", kind="flags", flags={flag: value},
                                   why=f"the log asks for a larger {flag}"))
    return out


def _speculative(c: Candidate) -> bool:
    return any(("specul" in k or k in ("--method",)) and v not in (None, False) for k, v in c.flags.items())
