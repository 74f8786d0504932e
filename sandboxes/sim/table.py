"""The fitted efficiency table the simulator ships (`calibration.json`, written by
`python -m sandboxes.sim.calibrate`), and the physical meaning and plausible range of each fitted
parameter. perf.py reads its rows; the calibration writes them; nothing else edits the file.

A row is keyed `framework/vendor` (a software stack on one vendor's hardware) or
`framework/vendor/version` for an older release measured on the same hardware: a version row is
its stack's row with one extra parameter, `maturity` (how much of the current release's achieved
bandwidth and GEMM rate that release's kernels reach).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

TABLE_PATH = Path(__file__).with_name("calibration.json")


@dataclass(frozen=True)
class Param:
    name: str
    low: float
    high: float
    prior: float  # centre of the weak prior: a row's value is drawn to its pool across rows, the pool to this
    meaning: str


# The fitted parameters of one framework/vendor row, each with the range a real stack shows.
ROW_PARAMS: tuple[Param, ...] = (
    Param("bw", 0.25, 0.92, 0.65, "achieved fraction of HBM bandwidth streaming weights and KV at full occupancy "
          "(H200 measured 0.64-0.69 for MoE / dense projections, FACTS.md)"),
    Param("gemm", 0.03, 0.80, 0.60, "achieved fraction of the dtype's dense peak on prefill GEMMs (H200 measured "
          "0.73-0.81 for dense bf16 projections from 1024 rows, FACTS.md: the prior's centre sits a little below, "
          "for the attention projections' narrower TP shards)"),
    Param("moe_gemm", 0.02, 0.80, 0.25, "achieved fraction of the dtype's dense peak on the routed experts' grouped "
          "GEMMs (each expert sees a few hundred of a chunk's tokens, over a narrow TP shard, with routing, "
          "gather/scatter and scale work around it); dense models do not reach it"),
    Param("layer_us", 3.0, 120.0, 25.0, "launch gap per layer per forward with graphs (kernel boundaries, syncs)"),
    Param("step_ms", 0.1, 8.0, 1.5, "host time per engine step (scheduling, sampling, output processing)"),
    Param("req_us", 1.0, 150.0, 20.0, "host time per running request per step (batch bookkeeping, detokenizing)"),
    Param("ar_us", 4.0, 60.0, 20.0, "latency of one small all-reduce over 4 ranks (one-shot, xGMI / NVLink)"),
    Param("attn", 0.03, 0.70, 0.25, "achieved fraction of the bf16 peak in attention kernels (prefill FLOPs)"),
    Param("moe_default", 0.3, 1.0, 0.67, "speed of the MoE kernels with an untuned default config relative to "
          "tuned (aiter ships tuned tables only for some dtypes; the story's fp4 MoE fell back)"),
    Param("req_ms", 2.0, 150.0, 30.0, "fixed latency per request outside the engine: HTTP, tokenizer and "
          "detokenizer IPC, the first step's scheduling; it adds to TTFT but does not block other requests"),
)
VERSION_PARAM = Param("maturity", 0.2, 1.0, 0.8, "fraction of the current release's achieved bandwidth and "
                      "GEMM rate an older release's kernels reach on the same hardware")
GLOBAL_PARAMS: tuple[Param, ...] = (
    Param("accept_text", 0.5, 0.98, 0.8, "per-position acceptance of an MTP / EAGLE draft on real text"),
    Param("accept_random", 0.1, 0.9, 0.45, "per-position acceptance of an MTP / EAGLE draft on random-token "
          "prompts (benchmark clients' random dataset: the continuation of noise is hard to guess)"),
)
# Measured, not fitted: MoE expert weights stream at touched/(touched + MOE_HALF_EXPERTS) of the
# saturated rate (H200, GLM-5.2 experts 4-way sharded: 1.63 TB/s at 8 experts, 2.73 at 96, 2.99 at
# 222, 3.05 at 256; FACTS.md): few experts per step cannot fill the GPU.
MOE_HALF_EXPERTS = 7.0

_cache: dict | None = None


def load(path: Path = TABLE_PATH) -> dict:
    global _cache
    if path != TABLE_PATH:
        return json.loads(path.read_text())
    if _cache is None:
        _cache = json.loads(path.read_text())
    return _cache


def reload() -> dict:
    """After the calibration rewrote the file (or a test wants a fresh read)."""
    global _cache
    _cache = None
    return load()


class using:
    """Within the block the simulator reads `tbl` instead of the shipped file (the fit tries
    candidate tables this way; nothing is written)."""

    def __init__(self, tbl: dict):
        self.tbl = tbl

    def __enter__(self) -> dict:
        global _cache
        self._saved, _cache = _cache, self.tbl
        return self.tbl

    def __exit__(self, *exc) -> None:
        global _cache
        _cache = self._saved
