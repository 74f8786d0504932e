"""The loop's measuring policy, and only the policy: which workloads, how many requests per
rate, where the knee search starts, and what one measurement records for decide.py.

The mechanics (schedule, load, summaries, knee search, single stream) are tools.bench.sweep's,
the same code `agent bench` runs, so both grounds and both commands measure alike; an HTTP
client fills prompt texts itself (tools.bench.client: exact token counts, distinct per run).
"""
from __future__ import annotations

import asyncio
import logging
import math
from functools import partial
from typing import Protocol

from agent.config import Measure, RunConfig
from tools.bench.metrics import knee
from tools.bench.refusal import refused
from tools.bench.sweep import knee_search, run_point


log = logging.getLogger("inferloop")


class EvalSuite(Protocol):
    """Accuracy tasks: per-item 0/1 correctness, the same items in the same order every call."""

    def run(self, client, *, limit: int, seed: int) -> dict[str, list[int]]: ...


def requests_at(m: Measure, rate: float) -> int:
    """Enough requests for `rate` to reach steady state over the measured duration."""
    return max(m.requests_per_point, math.ceil(rate * m.duration_s))


def first_rate(m: Measure, warmup) -> float:
    """Where the knee search starts: the lowest rate of its grid (start_rps x growth^k) at or above
    what the warmup's closed loop carried, or start_rps. A server that batches carries at least that
    much once requests arrive one by one instead of `warmup` at once, so the levels below it would
    only spend requests_per_point requests each far under the knee (a minute each on a CPU node,
    several on a GPU node; measured on the CPU testbed, 2026-12-06: the warmup carried 0.4 req/s, the
    knee was 1 req/s, and the 0.25 level took 42-60 s of a 4-minute trial). A knee below the start is
    still found, by walking down (knee_search). Only a warmup with every request answered counts."""
    if warmup.success < 1 or warmup.duration_s <= 0:
        return m.start_rps
    carried, rate = warmup.n / warmup.duration_s, m.start_rps
    while rate < carried:
        rate *= m.growth
    return rate


def _refused(label: dict, point, records) -> None:
    """Say how the level went; raise RequestsRefused when every request of it failed the same
    way: the rest of the sweep would only repeat it (tools/bench/refusal.py)."""
    what = ", ".join(f"{k} {v:g}" for k, v in label.items() if k != "repeat")
    failed = sum(not r.ok for r in records)
    p95 = f"{point.ttft_p95_s:.2f} s" if point.ttft_p95_s is not None else "-"
    log.info("    %s: %d requests, %d failed, TTFT p95 %s, %.1f tok/s over %.1f s", what, len(records), failed,
             p95, point.tok_s, point.duration_s)
    r = refused(label, records)
    if r is not None:
        raise r


def bench(server, cfg: RunConfig, hw, gpus: int, seed: int) -> dict:
    """One measurement of the running server, as the plain JSON decide.py reads. Raises
    RequestsRefused when the server refuses a load level's requests, all alike."""
    m, slo, client = cfg.measure, cfg.slo.ttft_p95_s, server.client
    start = m.start_rps
    if m.warmup:  # never measure a cold server (first compiled shapes, empty caches)
        warm, recs = asyncio.run(run_point(client, m.workload, n=m.warmup, concurrency=m.warmup, seed=seed + 10_000))
        _refused({"warmup": m.warmup}, warm, recs)
        if m.start_from_warmup:
            start = first_rate(m, warm)
    points = asyncio.run(knee_search(client, m.workload, ttft_slo_s=slo, n=partial(requests_at, m),
                                     start_rps=start, growth=m.growth, refine=m.bisect_steps,
                                     max_points=m.max_points, seed=seed, on_point=_refused))
    k = knee(points, slo)
    single, recs = asyncio.run(run_point(client, m.single_stream, n=m.single_stream_requests, concurrency=1,
                                         seed=seed + 1000))
    _refused({"single_stream": 1}, single, recs)
    return {"knee_tok_s": k.tok_s if k else None, "knee_rps": k.rps if k else None,
            "knee_ttft_p95_s": k.ttft_p95_s if k else None,
            "single_stream_tok_s": single.tok_s if single.success > 0 else None, "gpus": gpus,
            "usd_per_gpu_h": float(getattr(hw, "usd_per_gpu_h", 0.0) or 0.0),
            "tdp_w": float(getattr(hw, "tdp_w", 0.0) or 0.0),
            "sweep": [p.model_dump(mode="json") for p in points], "evals": None}
