"""The rate sweep over any `Client` (HTTP or simulated): points, knee, single stream, noise.

    result = await sweep(client, workload, rates=[0.5, 1, 2], n=64, ttft_slo_s=5.0)

The sweep does not know which ground it runs on: it builds the schedule (tools.bench.workload),
optionally fills prompt texts (a `prompt_fn`, e.g. PromptMaker.prompts for real servers), calls
`client.run`, and reduces records with tools.bench.metrics. Rates are run in rising order; with
`stop_after_break` the sweep stops at the first point that misses the SLO or loses requests
(that point is kept: it shows where the knee ends). `knee_search` picks the rates itself (rise
until the SLO breaks, then bisect) for callers that do not know where the knee is.
"""
from __future__ import annotations

import statistics
from typing import Awaitable, Callable

from tools.bench.metrics import BenchResult, SweepPoint, knee, meets_slo, summarize
from tools.bench.records import RequestRecord, RequestSpec
from tools.bench.workload import Workload, schedule
from tools.protocols import Client

PromptFn = Callable[..., list[RequestSpec]]  # (specs, seed=, prefix_seed=) -> specs with prompts
OnPoint = Callable[[dict, SweepPoint, list[RequestRecord]], None]  # label, point, records


async def run_point(client: Client, w: Workload, *, n: int, rate: float | None = None,
                    concurrency: int | None = None, seed: int = 0, prompt_fn: PromptFn | None = None,
                    ttft_slo_s: float | None = None) -> tuple[SweepPoint, list[RequestRecord]]:
    """One load level: n requests at a Poisson `rate`, or with `concurrency` in flight."""
    if (rate is None) == (concurrency is None):
        raise ValueError("give exactly one of rate or concurrency")
    specs = schedule(w, n=n, rate=rate, seed=seed)
    if prompt_fn is not None:
        specs = prompt_fn(specs, seed=seed, prefix_seed=0)
    recs = await client.run(specs, concurrency=concurrency)
    return summarize(recs, offered_rps=rate, fixed_concurrency=concurrency, ttft_slo_s=ttft_slo_s), recs


def _median_point(points: list[SweepPoint]) -> SweepPoint:
    """The repeat with the median throughput (a real run, not an average of runs)."""
    ranked = sorted(points, key=lambda p: p.tok_s)
    return ranked[(len(ranked) - 1) // 2]


def _spread(values: list[float]) -> float:
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med > 0 else 0.0


async def sweep(client: Client, w: Workload, *, ttft_slo_s: float, rates: list[float] | str | None = None,
                concurrencies: list[int] | None = None, n: int | Callable[[float], int] = 64,
                repeats: int = 1, warmup: int = 0, single_stream_n: int = 0, seed: int = 0,
                prompt_fn: PromptFn | None = None, stop_after_break: bool = False,
                on_point: OnPoint | None = None) -> BenchResult:
    """Run rising load levels; return the points, the knee, single-stream tok/s and the noise.
    `n` may be a function of the rate (e.g. rate x duration). rates="auto": search for the knee
    (knee_search) instead of walking given levels."""
    if not rates and not concurrencies:
        raise ValueError("give rates or concurrencies")
    auto = rates == "auto"
    if auto and (concurrencies or repeats > 1):
        raise ValueError("rates='auto' searches one run per rate: no concurrencies, no repeats")
    levels = [] if auto else \
        [("rate", r) for r in sorted(rates or [])] + [("concurrency", c) for c in sorted(concurrencies or [])]
    if warmup:
        await run_point(client, w, n=warmup, concurrency=warmup, seed=seed + 10_000, prompt_fn=prompt_fn)
    points: list[SweepPoint] = []
    if auto:
        points = await knee_search(client, w, ttft_slo_s=ttft_slo_s, n=n, seed=seed + 1, prompt_fn=prompt_fn,
                                   on_point=on_point)
    noise: dict = {"repeats": repeats, "tok_s": [], "ttft_p95_s": []}
    run_seed = seed
    for kind, level in levels:
        reps: list[SweepPoint] = []
        for r in range(repeats):
            run_seed += 1  # fresh unique suffixes each run: only the shared prefix hits the cache
            count = n(level) if callable(n) else n
            kw = {"rate": level} if kind == "rate" else {"concurrency": int(level)}
            p, recs = await run_point(client, w, n=count, seed=run_seed, prompt_fn=prompt_fn,
                                      ttft_slo_s=ttft_slo_s, **kw)
            reps.append(p)
            if on_point:
                on_point({kind: level, "repeat": r}, p, recs)
        best = _median_point(reps)
        points.append(best)
        noise["tok_s"].append([p.tok_s for p in reps])
        noise["ttft_p95_s"].append([p.ttft_p95_s for p in reps])
        if stop_after_break and not meets_slo(best, ttft_slo_s):
            break
    if repeats > 1:
        noise["tok_s_rel_spread_max"] = max(_spread(v) for v in noise["tok_s"])
    single = None
    if single_stream_n:
        p, recs = await run_point(client, w, n=single_stream_n, concurrency=1, seed=seed + 20_000,
                                  prompt_fn=prompt_fn)
        if on_point:
            on_point({"single_stream": True, "repeat": 0}, p, recs)
        single = p.tok_s if p.success > 0 else None
    workload = {**w.model_dump(), "num_prompts": n if not callable(n) else None, "seed": seed,
                "warmup": warmup, "exact_prompts": prompt_fn is not None}
    return BenchResult(sweep=points, knee=knee(points, ttft_slo_s), single_stream_tok_s=single,
                       ttft_slo_s=ttft_slo_s, workload=workload, noise=noise if repeats > 1 else None)


async def knee_search(client: Client, w: Workload, *, ttft_slo_s: float, n: int | Callable[[float], int] = 64,
                      start_rps: float = 0.5, growth: float = 2.0, refine: int = 3, max_points: int = 20,
                      min_rps: float = 0.02, seed: int = 0, prompt_fn: PromptFn | None = None,
                      on_point: OnPoint | None = None) -> list[SweepPoint]:
    """Find the knee without knowing where it is: rates rise by `growth` until one misses the SLO
    (or loses requests), walking down by halves if even the first does; then `refine` bisection
    steps between the last good and the first bad rate. Points sorted by offered rate."""
    points: list[SweepPoint] = []

    async def ok_at(rate: float) -> bool:
        p, recs = await run_point(client, w, n=n(rate) if callable(n) else n, rate=rate, seed=seed + len(points),
                                  prompt_fn=prompt_fn, ttft_slo_s=ttft_slo_s)
        points.append(p)
        if on_point:
            on_point({"rate": rate}, p, recs)
        return meets_slo(p, ttft_slo_s)

    good, bad, rate = None, None, start_rps
    while len(points) < max_points and bad is None:
        if await ok_at(rate):
            good, rate = rate, rate * growth
        else:
            bad = rate
    while good is None and bad is not None and len(points) < max_points and bad / 2 >= min_rps:
        if await ok_at(bad / 2):
            good = bad / 2
        else:
            bad = bad / 2
    for _ in range(refine if good is not None and bad is not None else 0):
        if len(points) >= max_points:
            break
        mid = (good + bad) / 2
        if await ok_at(mid):
            good = mid
        else:
            bad = mid
    return sorted(points, key=lambda p: p.offered_rps or 0.0)


def run_sync(coro: Awaitable):
    import asyncio
    return asyncio.run(coro)
