"""Measuring one running server: a rate sweep to the TTFT knee, single-stream speed, evals.

Works over any `Client` (the simulator's or HTTP), so both grounds are measured the same way.
The sweep doubles the offered rate until the SLO breaks, then bisects between the last good and
the first bad rate; the knee is the best SLO-meeting point (tools.bench.metrics.knee).
"""
from __future__ import annotations

import asyncio
from typing import Protocol

from agent.config import RunConfig
from tools.bench.metrics import knee, meets_slo, summarize
from tools.bench.workload import schedule


class EvalSuite(Protocol):
    """Accuracy tasks: per-item 0/1 correctness, the same items in the same order every call."""

    def run(self, client, *, limit: int, seed: int) -> dict[str, list[int]]: ...


async def _sweep(client, cfg: RunConfig, seed: int) -> list:
    m, slo = cfg.measure, cfg.slo.ttft_p95_s
    points, good, bad, rate, bisects = [], None, None, m.start_rps, 0
    while len(points) < m.max_points:
        specs = schedule(m.workload, n=m.requests_per_point, rate=rate, seed=seed + len(points))
        pt = summarize(await client.run(specs), offered_rps=rate, ttft_slo_s=slo)
        points.append(pt)
        if meets_slo(pt, slo):
            good = rate if good is None else max(good, rate)
        else:
            bad = rate if bad is None else min(bad, rate)
        if bad is None:
            rate *= 2
        elif good is None:
            rate /= 2
        else:
            if bisects >= m.bisect_steps:
                break
            bisects += 1
            rate = (good + bad) / 2
    return points


async def _single(client, cfg: RunConfig, seed: int):
    m = cfg.measure
    specs = schedule(m.single_stream, n=m.single_stream_requests, rate=None, seed=seed)
    return summarize(await client.run(specs, concurrency=1), fixed_concurrency=1)


def bench(client, cfg: RunConfig, hw, gpus: int, seed: int) -> dict:
    """One measurement of the running server, as the plain JSON decide.py reads."""
    points = asyncio.run(_sweep(client, cfg, seed))
    k = knee(points, cfg.slo.ttft_p95_s)
    single = asyncio.run(_single(client, cfg, seed + 1000))
    return {"knee_tok_s": k.tok_s if k else None, "knee_rps": k.rps if k else None,
            "knee_ttft_p95_s": k.ttft_p95_s if k else None,
            "single_stream_tok_s": single.tok_s, "gpus": gpus,
            "usd_per_gpu_h": float(getattr(hw, "usd_per_gpu_h", 0.0) or 0.0),
            "tdp_w": float(getattr(hw, "tdp_w", 0.0) or 0.0),
            "sweep": [p.model_dump(mode="json") for p in points], "evals": None}
