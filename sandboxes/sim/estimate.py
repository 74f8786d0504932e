"""The estimate of one configuration over any Client: tools.bench.sweep's knee search (rates rising
by 1.5x until the TTFT SLO or success breaks, then bisection), fixed rates or a fixed concurrency,
plus single stream. It never knows which ground it runs on (`agent estimate` runs it on the
simulator; the same function works against a real server's client)."""
from __future__ import annotations

import math

from tools.bench.metrics import BenchResult, knee
from tools.bench.sweep import knee_search, run_point, sweep
from tools.bench.workload import Workload
from tools.protocols import Client

SINGLE_STREAM = Workload(input_len=10000, output_len=1500, prefix_hit=0.0)  # the story's single stream


def requests_for(rate: float, duration_s: float, minimum: int = 30) -> int:
    return max(minimum, math.ceil(rate * duration_s))


async def estimate(client: Client, w: Workload, *, ttft_slo_s: float = 5.0, rates: list[float] | None = None,
                   concurrency: int | None = None, duration_s: float = 120.0, seed: int = 0,
                   single_stream: bool = True, on_point=None) -> BenchResult:
    """The project's BenchResult for one configuration: sweep (given rates, fixed concurrency,
    or the knee search), knee, and single-stream tok/s on the story's 10k/1.5k workload."""
    if rates or concurrency:
        res = await sweep(client, w, ttft_slo_s=ttft_slo_s, rates=rates or None,
                          concurrencies=[concurrency] if concurrency else None,
                          n=(lambda lvl: requests_for(lvl, duration_s)) if rates else max(4 * (concurrency or 1), 32),
                          seed=seed, on_point=on_point)
        points = res.sweep
    else:
        points = await knee_search(client, w, ttft_slo_s=ttft_slo_s, n=lambda r: requests_for(r, duration_s),
                                   start_rps=0.5, growth=1.5, refine=4, seed=seed, on_point=on_point)
    single = None
    if single_stream:
        p, _ = await run_point(client, SINGLE_STREAM, n=3, concurrency=1, seed=seed + 20_000)
        single = p.tok_s if p.success > 0 else None
    return BenchResult(sweep=points, knee=knee(points, ttft_slo_s), single_stream_tok_s=single,
                       ttft_slo_s=ttft_slo_s, workload={**w.model_dump(), "duration_s": duration_s, "seed": seed})
