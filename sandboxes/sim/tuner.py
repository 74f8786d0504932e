"""MoE kernel configs in the frameworks' real formats: where each framework looks for them, whether
one matches the model's shapes, and a simulated tuner that writes them.

- Triton fused MoE (vLLM, sglang on NVIDIA): JSON named `E={E},N={N},device_name={dev}[,dtype=..]
  [,block_shape=[128, 128]].json`, keyed by batch size M (nearest M is used).
- aiter fused MoE (ATOM, sglang / vLLM with aiter on ROCm): rows of `tuned_fmoe.csv`, looked up by
  (cu_num, token, model_dim, inter_dim, expert, topk, act_type, dtype, q_dtype_a, q_dtype_w, q_type,
  use_g1u1, doweight_stage1). aiter fuses the shared expert in as an extra expert (257 / top-9).
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from tools.hardware import HardwareProfile
from tools.models import ModelCard, MoeShape

SHIPPED_AITER_CSV = Path(__file__).parent / "source" / "aiter" / "aiter" / "configs" / "tuned_fmoe.csv"
AITER_COLUMNS = ["cu_num", "token", "model_dim", "inter_dim", "expert", "topk", "act_type", "dtype",
                 "q_dtype_a", "q_dtype_w", "q_type", "use_g1u1", "doweight_stage1", "block_m", "ksplit",
                 "us1", "kernelName1", "err1", "us2", "kernelName2", "err2", "us", "run_1stage", "tflops",
                 "bw", "_tag"]
AITER_KEYS = AITER_COLUMNS[:13]
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
TRITON_M = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]


def triton_dtype_suffix(weights: str) -> str:
    return {"fp8": ",dtype=fp8_w8a8,block_shape=[128, 128]", "mxfp4": ",dtype=mxfp4"}.get(weights, "")


def triton_filename(shape: MoeShape, hw: HardwareProfile, weights: str, *, vllm: bool = False) -> str:
    suffix = triton_dtype_suffix(weights)
    if vllm:  # vLLM writes the block shape without the space
        suffix = suffix.replace("[128, 128]", "[128,128]")
    return f"E={shape.E},N={shape.N},device_name={hw.device_name}{suffix}.json"


def _q_dtypes(weights: str, hw: HardwareProfile) -> tuple[str, str, str]:
    fp8 = "torch.float8_e4m3fnuz" if hw.arch == "gfx942" else "torch.float8_e4m3fn"
    return {"fp8": (fp8, fp8, "QuantType.per_1x128"),
            "mxfp4": ("torch.float4_e2m1fn_x2", "torch.float4_e2m1fn_x2", "QuantType.per_1x32")
            }.get(weights, ("torch.bfloat16", "torch.bfloat16", "QuantType.No"))


def aiter_key(model: ModelCard, hw: HardwareProfile, shape: MoeShape, weights: str, token: int) -> tuple:
    qa, qw, qt = _q_dtypes(weights, hw)
    shared = model.n_shared_experts
    return (str(hw.compute_units), str(token), str(shape.K), str(shape.N), str(shape.E + shared),
            str(shape.topk + shared), "ActivationType.Silu", "torch.bfloat16", qa, qw, qt, "True", "False")


def read_aiter_rows(paths: list[Path]) -> set[tuple]:
    keys: set[tuple] = set()
    for p in paths:
        if not p.is_file():
            continue
        with p.open(newline="") as f:
            for row in csv.DictReader(f):
                keys.add(tuple(str(row.get(k, "")) for k in AITER_KEYS))
    return keys


def aiter_tuned(model: ModelCard, hw: HardwareProfile, shape: MoeShape, weights: str,
                csv_paths: list[Path]) -> bool:
    """aiter uses its tuned kernels when the table has the shape at the batch sizes that matter;
    we require the decode-relevant token counts (1..256) to be present."""
    keys = read_aiter_rows(csv_paths)
    need = [aiter_key(model, hw, shape, weights, t) for t in TOKENS if t <= 256]
    return all(k in keys for k in need)


def triton_config(dirs: list[Path], name: str) -> Path | None:
    """The JSON the framework would load: an override dir first, then the shipped configs."""
    for d in dirs:
        p = d / name
        if p.is_file():
            try:
                json.loads(p.read_text())
            except ValueError:
                continue  # a broken file is as good as none: the framework falls back
            return p
    return None


def tuning_seconds(shape: MoeShape, n_batch_sizes: int, hw: HardwareProfile) -> float:
    """Simulated wall time of a tuning run: each batch size benchmarks a few hundred kernel
    configurations, a few ms each, more for bigger GEMMs (about 20-40 min on one node)."""
    work = shape.E * shape.N * shape.K / 1e9
    return n_batch_sizes * (60.0 + 8.0 * work) * (1.25 if hw.is_rocm else 1.0)


def write_triton(out_dir: Path, name: str) -> Path:
    cfg = {str(m): {"BLOCK_SIZE_M": 16 if m <= 32 else 64 if m <= 512 else 128,
                    "BLOCK_SIZE_N": 64 if m <= 16 else 128, "BLOCK_SIZE_K": 128 if m <= 64 else 256,
                    "GROUP_SIZE_M": 1 if m <= 32 else 16, "num_warps": 4 if m <= 64 else 8,
                    "num_stages": 2 if m <= 64 else 3} for m in TRITON_M}
    out_dir.mkdir(parents=True, exist_ok=True)
    p = out_dir / name
    p.write_text(json.dumps(cfg, indent=4) + "\n")
    return p


def aiter_rows(model: ModelCard, hw: HardwareProfile, shape: MoeShape, weights: str, tag: str) -> list[dict]:
    rows = []
    qname = {"mxfp4": "afp4_wfp4", "fp8": "afp8_wfp8"}.get(weights, "abf16_wbf16")
    for t in TOKENS:
        key = aiter_key(model, hw, shape, weights, t)
        bm = 32 if t <= 64 else 64 if t <= 1024 else 128
        us1, us2 = 18.0 + t * 0.05, 12.0 + t * 0.03
        rows.append(dict(zip(AITER_KEYS, key)) | {
            "block_m": bm, "ksplit": 0, "us1": round(us1, 2),
            "kernelName1": f"flydsl_moe1_{qname}_bf16_t{bm}x128x256_silu",
            "err1": "0.0%", "us2": round(us2, 2),
            "kernelName2": f"flydsl_moe2_{qname}_bf16_t{bm}x128x256", "err2": "0.0%",
            "us": round(us1 + us2, 2), "run_1stage": 0, "tflops": 0.0, "bw": 0.0, "_tag": tag})
    return rows


def write_aiter(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=AITER_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    return path
