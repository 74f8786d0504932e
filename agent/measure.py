"""The loop's measuring policy, and only the policy: which workloads, how many requests per
rate, where the knee search starts, and what one measurement records for decide.py.

The mechanics (schedule, load, summaries, knee search, single stream) are tools.bench.sweep's,
the same code `agent bench` runs, so both grounds and both commands measure alike; an HTTP
client fills prompt texts itself (tools.bench.client: exact token counts, distinct per run).
"""
from __future__ import annotations

import asyncio
import math
from functools import partial
from typing import Protocol

from agent.config import Measure, RunConfig
from tools.bench.metrics import knee
from tools.bench.sweep import knee_search, run_point


class EvalSuite(Protocol):
    """Accuracy tasks: per-item 0/1 correctness, the same items in the same order every call."""

    def run(self, client, *, limit: int, seed: int) -> dict[str, list[int]]: ...


def requests_at(m: Measure, rate: float) -> int:
    """Enough requests for `rate` to reach steady state over the measured duration."""
    return max(m.requests_per_point, math.ceil(rate * m.duration_s))


def bench(server, cfg: RunConfig, hw, gpus: int, seed: int) -> dict:
    """One measurement of the running server, as the plain JSON decide.py reads."""
    m, slo, client = cfg.measure, cfg.slo.ttft_p95_s, server.client
    if m.warmup:  # never measure a cold server (first compiled shapes, empty caches)
        asyncio.run(run_point(client, m.workload, n=m.warmup, concurrency=m.warmup, seed=seed + 10_000))
    points = asyncio.run(knee_search(client, m.workload, ttft_slo_s=slo, n=partial(requests_at, m),
                                     start_rps=m.start_rps, growth=m.growth, refine=m.bisect_steps,
                                     max_points=m.max_points, seed=seed))
    k = knee(points, slo)
    single, _ = asyncio.run(run_point(client, m.single_stream, n=m.single_stream_requests, concurrency=1,
                                      seed=seed + 1000))
    return {"knee_tok_s": k.tok_s if k else None, "knee_rps": k.rps if k else None,
            "knee_ttft_p95_s": k.ttft_p95_s if k else None,
            "single_stream_tok_s": single.tok_s if single.success > 0 else None, "gpus": gpus,
            "usd_per_gpu_h": float(getattr(hw, "usd_per_gpu_h", 0.0) or 0.0),
            "tdp_w": float(getattr(hw, "tdp_w", 0.0) or 0.0),
            "sweep": [p.model_dump(mode="json") for p in points], "evals": None}
