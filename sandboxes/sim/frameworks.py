"""How each framework behaves in the sim: its flags (parsed by the real adapter in
`tools.frameworks`) turned into a SimConfig, and the launch-time checks whose outcome is decided
by READING the run's framework source tree (so a correct patch there changes the behaviour).
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from sandboxes.sim.perf import SimConfig
from tools.candidate import Candidate
from tools.hardware import HardwareProfile
from tools.models import ModelCard

NEXTN_FILE = "python/sglang/srt/models/deepseek_nextn.py"
MULTI_STEP_CUH = "sgl-kernel/csrc/speculative/multi_step_metadata.cuh"
SGLANG_MOE_CONFIGS = "python/sglang/srt/layers/moe/fused_moe_triton/configs/triton_3_4_0"
VLLM_QUARK_MOE = "vllm/model_executor/layers/quantization/quark/quark_moe.py"
VLLM_MOE_CONFIGS = "vllm/model_executor/layers/fused_moe/configs"
ATOM_SPARSE_MLA = "atom/model_ops/sparse_mla.py"

_KV = {"sglang": {"auto": "auto", "bf16": "bf16", "bfloat16": "bf16", "fp8_e4m3": "fp8_e4m3",
                  "fp8_e5m2": "fp8_e5m2", "fp4_e2m1": "fp8_e4m3"},
       "atom": {"bf16": "bf16", "fp8": "fp8"}}


@dataclass
class Parsed:
    cfg: SimConfig
    notes: list[str]  # warnings the framework prints about its own adjustments


def to_config(framework: str, flags: dict, c: Candidate, model: ModelCard, hw: HardwareProfile) -> Parsed:
    """Framework flags (canonical name -> typed value, from parse_flags) -> SimConfig."""
    g = flags.get
    notes: list[str] = []
    cfg = SimConfig(framework=framework, weights=c.weights)
    if framework == "sglang":
        cfg.tp, cfg.dp = int(g("--tp-size", 1)), int(g("--dp-size", 1))
        cfg.ep = int(g("--ep-size", 1)) > 1
        cfg.kv_dtype = _KV["sglang"].get(str(g("--kv-cache-dtype", "auto")), "auto")
        algo = g("--speculative-algorithm")
        if algo:
            # 0.5.23 takes any string (a plugin's algorithm); unknown ones draft like EAGLE.
            cfg.spec = {"NEXTN": "mtp", "EAGLE": "mtp" if model.mtp_layers else "eagle", "EAGLE3": "eagle3",
                        "STANDALONE": "eagle3", "NGRAM": "ngram"}.get(str(algo).upper(), "eagle")
            steps, topk, draft = g("--speculative-num-steps"), g("--speculative-eagle-topk"), g("--speculative-num-draft-tokens")
            if steps is None and topk is None and draft is None:
                steps, topk, draft = 3, 1, 4  # sglang's auto choice for DeepSeek/GLM MTP
            steps, topk = int(steps or 3), int(topk or 1)
            draft = int(draft or steps + 1)
            if topk == 1 and draft != steps + 1:
                notes.append(f"speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                             f"speculative_eagle_topk == 1")
                draft = steps + 1
            cfg.spec_steps, cfg.spec_topk, cfg.spec_draft_tokens = steps, topk, draft - 1
        mrr = g("--max-running-requests")
        if mrr is None and cfg.spec:
            mrr = 48
            notes.append("Max running requests is reset to 48 for speculative decoding. You can override "
                         "this by explicitly setting --max-running-requests.")
        cfg.max_running = int(mrr) if mrr is not None else 1024
        cfg.ar_fusion = bool(g("--enable-aiter-allreduce-fusion")) and hw.is_rocm
        cfg.graphs = not g("--disable-cuda-graph")
        # A prefill batch holds at most --max-prefill-tokens, chunked or not (-1: no chunking).
        chunk, max_prefill = int(g("--chunked-prefill-size", 8192) or 8192), int(g("--max-prefill-tokens") or 16384)
        cfg.chunk = min(chunk, max_prefill) if chunk > 0 else max_prefill
        cfg.mem_fraction = float(g("--mem-fraction-static") or 0.85)
        cfg.prefix_cache = not g("--disable-radix-cache")
        # 0.5.23 split the bound into -decode/-prefill; decode is what the old one bounded.
        cfg.graph_max_bs = int(g("--cuda-graph-max-bs") or g("--cuda-graph-max-bs-decode")
                               or (cfg.max_running if cfg.spec else 256))
        # spec decoding (v1) turns the overlap scheduler off, as sglang logs
        cfg.overlap = not g("--disable-overlap-schedule") and not cfg.spec
        cfg.decode_steps = int(g("--num-continuous-decode-steps") or 1)
        cfg.conservativeness = float(g("--schedule-conservativeness") or 1.0)
        _dp_attention(cfg, bool(g("--enable-dp-attention")), notes)
    elif framework == "vllm":
        cfg.tp, cfg.dp = int(g("--tensor-parallel-size", 1)), int(g("--data-parallel-size", 1))
        cfg.ep = bool(g("--enable-expert-parallel"))
        kv = str(g("--kv-cache-dtype", "auto"))
        cfg.kv_dtype = "fp8" if kv.startswith("fp8") else "auto"
        spec = g("--speculative-config")
        if isinstance(spec, dict) and spec.get("method"):
            m = str(spec["method"])
            cfg.spec = {"deepseek_mtp": "mtp", "mtp": "mtp", "eagle": "eagle", "eagle3": "eagle3",
                        "ngram": "ngram"}.get(m, "eagle")
            n = int(spec.get("num_speculative_tokens", 1))
            cfg.spec_steps, cfg.spec_topk, cfg.spec_draft_tokens = n, 1, n
        seqs, tokens = _vllm_batch_defaults(hw, cfg.tp * int(g("--pipeline-parallel-size") or 1))
        cfg.max_running = int(g("--max-num-seqs") or seqs)
        cfg.chunk = int(g("--max-num-batched-tokens") or tokens)
        cfg.dtype = "float32" if str(g("--dtype") or "auto") in ("float32", "float") else "auto"
        cfg.mem_fraction = float(g("--gpu-memory-utilization") or 0.9)
        cfg.prefix_cache = g("--enable-prefix-caching") is not False
        cc = g("--compilation-config")
        cfg.graphs = not g("--enforce-eager") and not (isinstance(cc, dict) and cc.get("cudagraph_mode") == "NONE")
        cfg.ar_fusion = False
        cfg.overlap = bool(g("--async-scheduling"))
        cfg.graph_max_bs = 512
    elif framework == "atom":
        cfg.tp, cfg.dp = int(g("--tensor-parallel-size", 1)), int(g("--data-parallel-size", 1))
        cfg.ep = bool(g("--enable-expert-parallel"))
        cfg.kv_dtype = _KV["atom"].get(str(g("--kv_cache_dtype", "bf16")), "bf16")
        if g("--method"):
            cfg.spec = {"mtp": "mtp", "eagle3": "eagle3"}.get(str(g("--method")), "eagle")
            n = int(g("--num-speculative-tokens") or 1)
            cfg.spec_steps, cfg.spec_topk, cfg.spec_draft_tokens = n, 1, n
        cfg.max_running = int(g("--max-num-seqs") or 512)
        cfg.chunk = int(g("--max-num-batched-tokens") or 16384)
        cfg.mem_fraction = float(g("--gpu-memory-utilization") or 0.9)
        cfg.graphs = not g("--enforce-eager")
        cfg.ar_fusion = hw.is_rocm  # ATOM fuses allreduce+RMSNorm through aiter by default
        _dp_attention(cfg, bool(g("--enable-dp-attention")), notes)
    return Parsed(cfg, notes)


def _vllm_batch_defaults(hw: HardwareProfile, world: int) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) when the flags are unset. On CPU vLLM's own server
    defaults (engine/arg_utils.py get_batch_defaults, 0.32): 128 and 2048 per rank of tp x pp. On
    GPUs 256 and 8192, what the public points were fitted with; 0.28-0.33 give 1024 and 16384 from
    160 GiB (MI300X, B200, MI355X): with the shipped table that moves the TTFT median 20.2% ->
    19.6% and nothing else, so it waits for the next refit, which re-records what follows."""
    if hw.vendor == "cpu":
        return 128 * world, 2048 * world
    return 256, 8192


def _dp_attention(cfg: SimConfig, on: bool, notes: list[str]) -> None:
    """With DP attention, --dp-size splits attention over the tp GPUs of ONE engine (not dp
    replicas): weights and MoE span all tp GPUs, each attention rank keeps its own requests' KV."""
    if not on or cfg.dp <= 1:
        return
    if cfg.tp % cfg.dp:
        notes.append(f"dp attention needs tp_size % dp_size == 0 (tp={cfg.tp}, dp={cfg.dp}); ignored")
        return
    cfg.attn_dp, cfg.dp = cfg.dp, 1
    cfg.conservativeness *= 0.3  # server_args.py _handle_data_parallelism, silently (0.5.8, 0.5.23)
    notes.append(f"DP attention is enabled. The chunked prefill size is adjusted to {cfg.chunk} to avoid MoE kernel "
                 f"issues. attn_dp_size={cfg.attn_dp}")


# ---- sglang: the NextN weight-name mapper and the MTP quant exclusions -----------------------
def read_nextn_mapper(tree: Path) -> dict[str, str]:
    """`orig_to_new_prefix` of `hf_to_sglang_mapper`, read as a literal (the file is not run)."""
    src = (tree / NEXTN_FILE).read_text()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "hf_to_sglang_mapper" for t in node.targets):
            call = node.value
            for kw in getattr(call, "keywords", []):
                if kw.arg == "orig_to_new_prefix":
                    return {str(k): str(v) for k, v in ast.literal_eval(kw.value).items()}
    return {}


def map_name(name: str, mapper: dict[str, str]) -> str:
    """WeightsMapper prefix renaming with the longest matching prefix winning."""
    best = max((p for p in mapper if name.startswith(p)), key=len, default=None)
    return name if best is None else mapper[best] + name[len(best):]


def mtp_modules(model: ModelCard) -> list[tuple[str, str, list[int], list[int]]]:
    """(runtime name, checkpoint name, bf16 shape, mxfp4 packed shape) of the MTP layer's linear
    modules, in load order. mxfp4 packs two 4-bit values per uint8 along the input dim."""
    n, h = model.num_hidden_layers, model.hidden_size
    mods = [("model.eh_proj", "eh_proj", [h, 2 * h]),
            ("model.decoder.mlp.shared_experts.gate_up_proj", "mlp.shared_experts.gate_up_proj",
             [2 * model.moe_intermediate_size * max(model.n_shared_experts, 1), h]),
            ("model.decoder.mlp.shared_experts.down_proj", "mlp.shared_experts.down_proj",
             [h, model.moe_intermediate_size * max(model.n_shared_experts, 1)]),
            ("model.shared_head.head", "shared_head.head", [model.vocab_size, h])]
    return [(rt, f"model.layers.{n}.{ck}", shp, [shp[0], shp[1] // 2]) for rt, ck, shp in mods]


def nextn_mismatch(tree: Path, model: ModelCard) -> tuple[str, str, list[int], list[int]] | None:
    """With MXFP4 weights the Quark checkpoint keeps the MTP layer in bf16 (its modules are on
    the exclude list under checkpoint names). sglang maps those names with the NextN mapper; a
    runtime module whose excluded name does not map onto it is built as MXFP4 -> first mismatch."""
    mapper = read_nextn_mapper(tree)
    excluded = {map_name(ck, mapper) for _, ck, _, _ in mtp_modules(model)}
    for rt, ck, bf16, packed in mtp_modules(model):
        if rt not in excluded:
            return rt, ck, packed, bf16
    return None


# ---- sglang: the fused multi-step metadata kernel, preprocessed for ROCm --------------------
_MISSING_ON_ROCM = re.compile(r"^(cuda_runtime\.h|cuda\.h|cuda_fp16\.h|cuda_bf16\.h|cuda_fp8\.h|cub/.*)$")


def preprocess_includes(text: str, defines: set[str]) -> list[tuple[int, int, str]]:
    """(line, col, header) of every #include that survives conditional compilation. Handles
    #ifdef / #ifndef / #if defined(X) / #if !defined(X) / #elif defined(X) / #else / #endif."""
    out: list[tuple[int, int, str]] = []
    stack: list[list[bool]] = []  # [active, taken]

    def cond(expr: str) -> bool:
        expr = expr.strip()
        m = re.fullmatch(r"(!)?\s*defined\s*\(?\s*(\w+)\s*\)?", expr)
        if m:
            return (m.group(2) in defines) != bool(m.group(1))
        return expr not in ("0", "")

    for i, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        active = all(a for a, _ in stack)
        if m := re.match(r"#\s*ifdef\s+(\w+)", s):
            v = m.group(1) in defines
            stack.append([v, v])
        elif m := re.match(r"#\s*ifndef\s+(\w+)", s):
            v = m.group(1) not in defines
            stack.append([v, v])
        elif m := re.match(r"#\s*if\s+(.*)", s):
            v = cond(m.group(1))
            stack.append([v, v])
        elif (m := re.match(r"#\s*elif\s+(.*)", s)) and stack:
            v = not stack[-1][1] and cond(m.group(1))
            stack[-1] = [v, stack[-1][1] or v]
        elif re.match(r"#\s*else\b", s) and stack:
            stack[-1] = [not stack[-1][1], True]
        elif re.match(r"#\s*endif\b", s) and stack:
            stack.pop()
        elif active and (m := re.match(r"(\s*#\s*include\s*)[<\"]([^>\"]+)[>\"]", line)):
            out.append((i, len(m.group(1)) + 1, m.group(2)))
    return out


def rocm_compile_error(tree: Path) -> str | None:
    """The clang/hipcc error line if the multi-step kernel includes a CUDA-only header on ROCm."""
    path = tree / MULTI_STEP_CUH
    if not path.is_file():
        return f"{MULTI_STEP_CUH}:1:1: fatal error: file not found"
    text = path.read_text()
    includes = preprocess_includes(text, {"USE_ROCM", "__HIP_PLATFORM_AMD__"})
    for line, col, header in includes:
        if _MISSING_ON_ROCM.match(header):
            return f"{MULTI_STEP_CUH}:{line}:{col}: fatal error: '{header}' file not found"
    if not any(h == "hip/hip_runtime.h" for _, _, h in includes):
        # Without a runtime header the kernel's builtins are undeclared.
        for i, src in enumerate(text.splitlines(), 1):
            if (col := src.find("blockIdx")) >= 0:
                return f"{MULTI_STEP_CUH}:{i}:{col + 1}: error: use of undeclared identifier 'blockIdx'"
    return None


# ---- vLLM: Quark MoE scheme support by architecture -----------------------------------------
def vllm_quark_unsupported(tree: Path, model: ModelCard, weights: str) -> str | None:
    if weights != "mxfp4" or not model.is_moe:
        return None
    src = (tree / VLLM_QUARK_MOE).read_text()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "SUPPORTED_MOE_SCHEMES" for t in node.targets):
            archs = ast.literal_eval(node.value).get("w4a4_mxfp4", ())
            if archs is None or model.architecture in archs:
                return None
            return (f"NotImplementedError: Quark MoE quantization scheme w4a4_mxfp4 is not supported "
                    f"for {model.architecture}")
    return None


# ---- ATOM: the indexer's key window ------------------------------------------------------------
def atom_indexer_window(tree: Path) -> int | None:
    src = (tree / ATOM_SPARSE_MLA).read_text()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MAX_INDEXER_KEYS" for t in node.targets):
            return int(ast.literal_eval(node.value))
    return None


def env_path(c: Candidate, var: str) -> Path | None:
    """A path the candidate's environment points the framework at (the host's env is not
    consulted: the simulated node has its own)."""
    v = c.env.get(var) if var else None
    return Path(v) if v else None
