"""Hardware profiles: what one GPU (and its node) can do, and what it costs.

Figures are dense peaks per GPU. Sources: SemiAnalysis InferenceX gpu-specs (HBM, TB/s, TFLOP/s,
scale-up bandwidth, $/GPU-hour hyperscaler / neocloud), vendor pages for TDP; as collected in
../shared/FACTS.md ("Hardware"). `cpu` is probed from the machine we run on.
"""
from __future__ import annotations

import functools
import math
import os
import time

import numpy as np
from pydantic import BaseModel, ConfigDict

from tools.errors import unknown


class HardwareProfile(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    vendor: str  # amd | nvidia | cpu
    device_name: str  # as torch/triton name the device (used in tuned-config file names)
    hbm_gb: float  # memory per GPU (GB)
    hbm_tb_s: float  # memory bandwidth per GPU (TB/s)
    tflops: dict[str, float]  # dense peak TFLOP/s per compute dtype: bf16, fp8, fp4 (absent: no support)
    scaleup_gb_s: float  # unidirectional scale-up (xGMI / NVLink) bandwidth per GPU (GB/s)
    gpus_per_node: int = 8
    tdp_w: float
    usd_per_gpu_h: float  # hyperscaler price
    usd_per_gpu_h_neocloud: float
    compute_units: int = 0  # CUs (AMD) / SMs (NVIDIA): aiter's tuned tables are keyed by cu_num
    arch: str = ""
    # Ceilings measured on a real device (not datasheet peaks): copy_tb_s (device-to-device copy,
    # bytes read + written), bf16_mm_tflops (8192^3 bf16 matmul, random data), with their source.
    measured: dict = {}

    def peak_tflops(self, dtype: str) -> float:
        """Peak for a compute dtype; a dtype the chip lacks runs in the next wider one
        (FP4 weights on a chip without FP4 units are dequantized and run in FP8)."""
        for d in {"fp4": ("fp4", "fp8", "bf16"), "fp8": ("fp8", "bf16")}.get(dtype, (dtype, "bf16")):
            if d in self.tflops:
                return self.tflops[d]
        return self.tflops["bf16"]

    @property
    def is_rocm(self) -> bool:
        return self.vendor == "amd"


_PROFILES = {
    # H100 SXM: 80 GB, 3.35 TB/s, 989/1979 TF bf16/fp8, NVLink 450 GB/s, 700 W; $1.30 / $1.69 (FACTS.md)
    "h100": dict(vendor="nvidia", device_name="NVIDIA_H100_80GB_HBM3", hbm_gb=80, hbm_tb_s=3.35,
                 tflops={"bf16": 989, "fp8": 1979}, scaleup_gb_s=450, tdp_w=700, usd_per_gpu_h=1.30,
                 usd_per_gpu_h_neocloud=1.69, compute_units=132, arch="sm_90"),
    # H200 SXM: 141 GB, 4.8 TB/s, 989/1979 TF, NVLink 450 GB/s, 700 W; $1.41 / $1.74 (FACTS.md)
    "h200": dict(vendor="nvidia", device_name="NVIDIA_H200", hbm_gb=141, hbm_tb_s=4.8,
                 tflops={"bf16": 989, "fp8": 1979}, scaleup_gb_s=450, tdp_w=700, usd_per_gpu_h=1.41,
                 usd_per_gpu_h_neocloud=1.74, compute_units=132, arch="sm_90",
                 # measured on the device tool's H200 (torch 2.11, CUDA events, median of repeats after
                 # warm-up, random data), 2026-11-29
                 measured={"copy_tb_s": 4.14, "bf16_mm_tflops": 751, "source": "tests/gpu/results/probe/hw.json"}),
    # B200: 180 GB, 8 TB/s, 2250/4500/9000 TF bf16/fp8/fp4, NVLink5 900 GB/s, 1000 W; $1.95 / $2.34 (FACTS.md)
    "b200": dict(vendor="nvidia", device_name="NVIDIA_B200", hbm_gb=180, hbm_tb_s=8.0,
                 tflops={"bf16": 2250, "fp8": 4500, "fp4": 9000}, scaleup_gb_s=900, tdp_w=1000,
                 usd_per_gpu_h=1.95, usd_per_gpu_h_neocloud=2.34, compute_units=148, arch="sm_100"),
    # B300: 268-288 GB (288 used), 8 TB/s, 2250/4500/13500 TF, 900 GB/s, ~1100-1400 W (1100 used);
    # $2.34 / $2.81 (FACTS.md)
    "b300": dict(vendor="nvidia", device_name="NVIDIA_B300", hbm_gb=288, hbm_tb_s=8.0,
                 tflops={"bf16": 2250, "fp8": 4500, "fp4": 13500}, scaleup_gb_s=900, tdp_w=1100,
                 usd_per_gpu_h=2.34, usd_per_gpu_h_neocloud=2.81, compute_units=148, arch="sm_103"),
    # MI300X: 192 GB, 5.3 TB/s, 1307/2615 TF, xGMI 448 GB/s, 750 W; $1.12 / $1.40 (FACTS.md)
    "mi300x": dict(vendor="amd", device_name="AMD_Instinct_MI300X", hbm_gb=192, hbm_tb_s=5.3,
                   tflops={"bf16": 1307, "fp8": 2615}, scaleup_gb_s=448, tdp_w=750, usd_per_gpu_h=1.12,
                   usd_per_gpu_h_neocloud=1.40, compute_units=304, arch="gfx942"),
    # MI325X: 256 GB HBM3E, 6.0 TB/s, same CDNA3 compute as MI300X (1307/2615 TF bf16/fp8), xGMI
    # 448 GB/s, 1000 W, 304 CUs gfx942 (AMD MI325X datasheet). No price in FACTS.md: MI300X's
    # prices are used (an assumption, marked as such; it only affects $/token reports).
    "mi325x": dict(vendor="amd", device_name="AMD_Instinct_MI325X", hbm_gb=256, hbm_tb_s=6.0,
                   tflops={"bf16": 1307, "fp8": 2615}, scaleup_gb_s=448, tdp_w=1000, usd_per_gpu_h=1.12,
                   usd_per_gpu_h_neocloud=1.40, compute_units=304, arch="gfx942"),
    # MI355X: 288 GB, 8 TB/s, 2516/5033/10066 TF (MXFP4; FP6 same), xGMI ~538-576 GB/s (557 used),
    # 1400 W, 256 CUs gfx950; $1.48 / $1.90 (FACTS.md)
    "mi355x": dict(vendor="amd", device_name="AMD_Instinct_MI355X", hbm_gb=288, hbm_tb_s=8.0,
                   tflops={"bf16": 2516, "fp8": 5033, "fp4": 10066, "fp6": 10066}, scaleup_gb_s=557,
                   tdp_w=1400, usd_per_gpu_h=1.48, usd_per_gpu_h_neocloud=1.90, compute_units=256,
                   arch="gfx950"),
}
NAMES = tuple(_PROFILES) + ("cpu",)


@functools.lru_cache(maxsize=1)
def probe_cpu() -> HardwareProfile:
    """This machine as a 'node' of one device: cores, memory, and a tiny numpy probe of
    matmul FLOP/s and copy bandwidth (a few tens of ms)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    except (ValueError, OSError, AttributeError):
        mem_gb = 8.0
    a = np.ones((512, 512), dtype=np.float32)
    a @ a  # warm the BLAS threads
    t = time.perf_counter()
    for _ in range(4):
        a @ a
    flops = 4 * 2 * 512 ** 3 / max(time.perf_counter() - t, 1e-9)
    buf = np.ones(64 * 1024 * 1024 // 4, dtype=np.float32)  # 64 MB: larger than any L3 here
    buf.copy()
    best = math.inf
    for _ in range(5):  # the fastest copy: what the memory system delivers when not contended
        t = time.perf_counter()
        buf.copy()
        best = min(best, time.perf_counter() - t)
    bw = 2 * buf.nbytes / max(best, 1e-9)  # read + write
    # The numpy fp32 probe says what this (shared) machine delivers right now; inference kernels
    # (oneDNN bf16) reach the vector units' peak far better, so the profile's peak comes from the
    # ISA and clock, and the probe is kept alongside for the record.
    return cpu_profile(cores, mem_gb, flops, bw)


def cpu_profile(cores: int, mem_gb: float, flops: float, bw: float) -> HardwareProfile:
    """The `cpu` node from what probe_cpu measured: matmul FLOP/s and copy bandwidth (B/s)."""
    peak = max(flops, cores * _ghz() * 1e9 * _flops_per_cycle())
    # The floor only guards a broken timer: a real floor (it was 10 GB/s) hid the slower of two
    # machines of one kind (8.3 vs 10.4 GB/s measured, decode 18% slower), so the sim called both fast.
    return HardwareProfile(name="cpu", vendor="cpu", device_name="cpu", hbm_gb=round(mem_gb, 1),
                           hbm_tb_s=max(bw, 1e9) / 1e12,
                           tflops={"bf16": peak / 1e12, "fp32": peak / 2e12, "probe_fp32": flops / 1e12},
                           scaleup_gb_s=bw / 1e9,
                           gpus_per_node=1, tdp_w=15.0 * cores, usd_per_gpu_h=0.05 * cores,
                           usd_per_gpu_h_neocloud=0.05 * cores, compute_units=cores, arch="x86_64")


def _cpuinfo() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return f.read(200_000)
    except OSError:
        return ""


def _ghz() -> float:
    import re
    m = re.search(r"cpu MHz\s*:\s*([\d.]+)", _cpuinfo())
    return float(m.group(1)) / 1000 if m else 2.0


def native_bf16(info: str | None = None) -> bool:
    """Whether this CPU has a bf16 instruction (AVX512-BF16 dot products, AMX tiles)."""
    info = _cpuinfo() if info is None else info
    return "avx512_bf16" in info or "amx_bf16" in info


def _flops_per_cycle() -> float:
    """bf16 FLOPs per core per cycle: AVX512-BF16 dot products 64, AVX-512 fp32 FMA 32, AVX2 16."""
    info = _cpuinfo()
    if native_bf16(info):
        return 64.0
    return 32.0 if "avx512f" in info else 16.0


def get_hardware(name: str) -> HardwareProfile:
    if name == "cpu":
        return probe_cpu()
    if name not in _PROFILES:
        raise unknown("hardware", name, NAMES)
    return HardwareProfile(name=name, **_PROFILES[name])
