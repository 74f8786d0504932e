"""Find the knee of any Client: rates rising until the TTFT SLO or success breaks, then bisection
between the last good and the first bad rate; plus single stream. Built on tools.bench.sweep's
`run_point` / `sweep`, so it never knows which ground it runs on (`agent estimate` runs it on the
simulator; the same function works against a real server's client)."""
from __future__ import annotations

import math

from tools.bench.metrics import BenchResult, SweepPoint, knee, meets_slo
from tools.bench.sweep import run_point, sweep
from tools.bench.workload import Workload
from tools.protocols import Client

SINGLE_STREAM = Workload(input_len=10000, output_len=1500, prefix_hit=0.0)  # the story's single stream


def requests_for(rate: float, duration_s: float, minimum: int = 30) -> int:
    return max(minimum, math.ceil(rate * duration_s))


async def knee_search(client: Client, w: Workload, *, ttft_slo_s: float = 5.0, start_rps: float = 0.5,
                      growth: float = 1.5, refine: int = 4, duration_s: float = 120.0, seed: int = 0,
                      max_points: int = 20, on_point=None) -> list[SweepPoint]:
    """Points at rising rates until one breaks the SLO (or loses requests), then `refine`
    bisection steps between the last good and the first bad rate. Sorted by offered rate."""
    points: list[SweepPoint] = []

    async def at(rate: float) -> SweepPoint:
        p, recs = await run_point(client, w, n=requests_for(rate, duration_s), rate=rate,
                                  seed=seed + len(points), ttft_slo_s=ttft_slo_s)
        points.append(p)
        if on_point:
            on_point({"rate": rate}, p, recs)
        return p

    good, bad, rate = None, None, start_rps
    while len(points) < max_points:
        if meets_slo(await at(rate), ttft_slo_s):
            good, rate = rate, rate * growth
        else:
            bad = rate
            break
    if good is None and bad is not None:  # even the first rate breaks: walk down
        while len(points) < max_points and bad > 0.02:
            rate = bad / 2
            if meets_slo(await at(rate), ttft_slo_s):
                good = rate
                break
            bad = rate
    for _ in range(refine if good is not None and bad is not None else 0):
        mid = (good + bad) / 2
        if meets_slo(await at(mid), ttft_slo_s):
            good = mid
        else:
            bad = mid
    return sorted(points, key=lambda p: p.offered_rps or 0.0)


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
        points = await knee_search(client, w, ttft_slo_s=ttft_slo_s, duration_s=duration_s, seed=seed,
                                   on_point=on_point)
    single = None
    if single_stream:
        p, _ = await run_point(client, SINGLE_STREAM, n=3, concurrency=1, seed=seed + 20_000)
        single = p.tok_s if p.success > 0 else None
    return BenchResult(sweep=points, knee=knee(points, ttft_slo_s), single_stream_tok_s=single,
                       ttft_slo_s=ttft_slo_s, workload={**w.model_dump(), "duration_s": duration_s, "seed": seed})
