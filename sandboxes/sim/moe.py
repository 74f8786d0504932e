"""Which MoE kernel config a framework would load on this node, and the log line it prints."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sandboxes.sim import tuner
from sandboxes.sim.frameworks import SGLANG_MOE_CONFIGS, VLLM_MOE_CONFIGS, env_path
from tools.candidate import Candidate
from tools.hardware import HardwareProfile
from tools.models import ModelCard

SGLANG_TUNE_URL = "https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton"


@dataclass
class MoeState:
    backend: str  # aiter | triton
    tuned: bool
    line: str  # what the framework logs about it
    where: str  # source location the line comes from (vLLM style logs)


def backend(framework: str, c: Candidate, hw: HardwareProfile) -> str:
    if framework == "atom":
        return "aiter"
    chosen = c.flags.get("--moe-runner-backend")
    if framework == "sglang" and chosen in ("triton", "aiter"):
        return "aiter" if chosen == "aiter" and hw.is_rocm else "triton"
    if hw.is_rocm and framework == "sglang" and c.env.get("SGLANG_USE_AITER", "1") != "0":
        return "aiter"  # the ROCm sglang images run with SGLANG_USE_AITER=1
    if hw.is_rocm and framework == "vllm" and c.env.get("VLLM_ROCM_USE_AITER") == "1" \
            and c.env.get("VLLM_ROCM_USE_AITER_MOE", "1") != "0":
        return "aiter"
    return "triton"


def _aiter_tuple(key: tuple) -> str:
    parts = []
    for v in key:
        parts.append(v if v.lstrip("-").isdigit() or v in ("True", "False") else repr(v))
    return "(" + ", ".join(parts) + ")"


def state(framework: str, c: Candidate, model: ModelCard, hw: HardwareProfile, tp: int, ep: bool,
          tree: Path, token: int) -> MoeState | None:
    if not model.is_moe:
        return None
    shape = model.moe_shapes(tp, tp if ep else 1)
    be = backend(framework, c, hw)
    if be == "aiter":
        # only through aiter's variable, as aiter reads it: a table the candidate lists under
        # another variable (sglang's SGLANG_MOE_CONFIG_DIR is a folder of Triton configs) is not read
        paths = [tuner.SHIPPED_AITER_CSV]
        if (p := env_path(c, "AITER_CONFIG_FMOE")) is not None:
            paths.append(p)
        tuned = tuner.aiter_tuned(model, hw, shape, c.weights, paths)
        key = _aiter_tuple(tuner.aiter_key(model, hw, shape, c.weights, token))
        if tuned:
            q = {"mxfp4": "afp4_wfp4", "fp8": "afp8_wfp8"}.get(c.weights, "abf16_wbf16")
            line = (f"[fused_moe] using 2stage (kernelName1='flydsl_moe1_{q}_bf16_t64x128x256_silu', "
                    f"kernelName2='flydsl_moe2_{q}_bf16_t64x128x256') for {key}")
        else:
            line = f"[fused_moe] using 2stage default for {key}"
        return MoeState("aiter", tuned, line, "fused_moe.py:802")
    name = tuner.triton_filename(shape, hw, c.weights, vllm=framework == "vllm")
    env_var = {"sglang": "SGLANG_MOE_CONFIG_DIR", "vllm": "VLLM_TUNED_CONFIG_FOLDER"}.get(framework, "")
    shipped = tree / (SGLANG_MOE_CONFIGS if framework == "sglang" else VLLM_MOE_CONFIGS)
    dirs = [d for d in (env_path(c, env_var),) if d is not None] + [shipped]
    found = tuner.triton_config(dirs, name)
    if framework == "sglang":
        line = (f"Using MoE kernel config from {found}." if found else
                f"Using default MoE kernel config. Performance might be sub-optimal! Config file not found at "
                f"{shipped / name}, you can create them with {SGLANG_TUNE_URL}")
    else:
        line = (f"Using configuration from {found} for MoE layer." if found else
                f"Using default MoE config. Performance might be sub-optimal! Config file not found at {shipped / name}")
    return MoeState("triton", found is not None, line, "fused_moe.py:731")


def tune(framework: str, c: Candidate, model: ModelCard, hw: HardwareProfile, tp: int, ep: bool,
         out_dir: Path) -> tuple[list[Path], float]:
    """Run the (simulated) tuner for the target's shapes: the files written and seconds spent."""
    shape = model.moe_shapes(tp, tp if ep else 1)
    if backend(framework, c, hw) == "aiter":
        rows = tuner.aiter_rows(model, hw, shape, c.weights, "inferloop-tuned")
        path = tuner.write_aiter(out_dir / "tuned_fmoe.csv", rows)
        return [path], tuner.tuning_seconds(shape, len(tuner.TOKENS), hw)
    name = tuner.triton_filename(shape, hw, c.weights, vllm=framework == "vllm")
    return [tuner.write_triton(out_dir, name)], tuner.tuning_seconds(shape, len(tuner.TRITON_M), hw)
