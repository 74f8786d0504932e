"""Pure metrics over RequestRecords: one sweep point per run, the knee of a sweep.

Written once, used by both grounds (`agent estimate` on the simulator, `agent bench` on a real
server). The JSON shape of `SweepPoint` and `BenchResult` is the project's one result schema.
"""
from __future__ import annotations

import numpy as np
from pydantic import BaseModel

from tools.bench.records import RequestRecord


class SweepPoint(BaseModel):
    offered_rps: float | None = None  # what the load generator aimed at (None: fixed concurrency)
    rps: float  # achieved: successful requests per second over the run's span
    concurrency: float  # mean requests in flight (Little's law), or the fixed concurrency
    tok_s: float  # output tokens per second for the whole node
    total_tok_s: float  # input + output tokens per second
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    ttft_mean_s: float | None = None
    tpot_p50_s: float | None
    itl_p50_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p95_s: float | None = None
    success: float  # fraction of requests that completed ok
    n: int
    duration_s: float
    goodput_rps: float | None = None  # successful requests per second that met the TTFT SLO


class Knee(BaseModel):
    rps: float
    tok_s: float
    ttft_p95_s: float | None = None


class BenchResult(BaseModel):
    sweep: list[SweepPoint]
    knee: Knee | None
    single_stream_tok_s: float | None = None
    ttft_slo_s: float
    workload: dict = {}
    noise: dict | None = None  # spread over repeats, when measured


def _pct(xs: list[float], q: float) -> float | None:
    return float(np.percentile(xs, q)) if xs else None


def summarize(records: list[RequestRecord], *, offered_rps: float | None = None,
              fixed_concurrency: int | None = None, ttft_slo_s: float | None = None) -> SweepPoint:
    """Reduce one run's records to a sweep point. Failed requests count against success and
    contribute the tokens they did deliver (that is what the server actually produced)."""
    if not records:
        raise ValueError("no requests were recorded")
    start = min(r.send_s for r in records)
    span = max(max(r.end_s for r in records) - start, 1e-9)
    ok = [r for r in records if r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpots = [(r.latency_s - r.ttft_s) / (r.output_tokens - 1)
             for r in ok if r.ttft_s is not None and r.output_tokens > 1]
    itls = [b - a for r in ok for a, b in zip(r.token_times_s, r.token_times_s[1:])]
    out_tokens = sum(r.output_tokens for r in records)
    in_tokens = sum(r.input_tokens for r in ok)
    goodput = None
    if ttft_slo_s is not None:
        goodput = sum(1 for r in ok if r.ttft_s is not None and r.ttft_s <= ttft_slo_s) / span
    return SweepPoint(
        offered_rps=offered_rps,
        rps=len(ok) / span,
        concurrency=float(fixed_concurrency) if fixed_concurrency else sum(r.latency_s for r in records) / span,
        tok_s=out_tokens / span,
        total_tok_s=(out_tokens + in_tokens) / span,
        ttft_p50_s=_pct(ttfts, 50), ttft_p95_s=_pct(ttfts, 95),
        ttft_mean_s=float(np.mean(ttfts)) if ttfts else None,
        tpot_p50_s=_pct(tpots, 50), itl_p50_s=_pct(itls, 50),
        e2e_p50_s=_pct([r.latency_s for r in ok], 50), e2e_p95_s=_pct([r.latency_s for r in ok], 95),
        success=len(ok) / len(records), n=len(records), duration_s=span, goodput_rps=goodput,
    )


def meets_slo(p: SweepPoint, ttft_slo_s: float) -> bool:
    return p.success >= 1.0 and p.ttft_p95_s is not None and p.ttft_p95_s <= ttft_slo_s


def knee(points: list[SweepPoint], ttft_slo_s: float) -> Knee | None:
    """The highest achieved rate whose TTFT p95 meets the SLO with every request successful."""
    ok = [p for p in points if meets_slo(p, ttft_slo_s)]
    if not ok:
        return None
    best = max(ok, key=lambda p: (p.rps, p.tok_s))
    return Knee(rps=best.rps, tok_s=best.tok_s, ttft_p95_s=best.ttft_p95_s)
