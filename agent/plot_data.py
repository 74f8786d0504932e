"""What the report's plots show, as plain data computed from the ledger's JSON (agent/plots.py
draws it). Pure, so each series is tested with `assert f(x) == y` apart from matplotlib.

- frontier: output tok/s per GPU against interactivity (output tok/s per user = 1 / TPOT), the
  trade-off InferenceX and the vendors publish; one curve per configuration, its Pareto envelope.
- ttft: TTFT p50/p95 against the OFFERED rate (an overloaded server achieves less than it is
  offered, so against achieved rate the curve would run backwards), with the knee's point.
- trials: each trial's objective over cumulative ground time, the running best, phase bands.
"""
from __future__ import annotations

from pydantic import BaseModel


class Curve(BaseModel):
    label: str
    x: list[float]
    y: list[float]


def frontier(sweep: list[dict], gpus: int) -> Curve:
    """(interactivity, throughput per GPU) of the successful points with a TPOT, on the Pareto
    envelope: no other point is both more interactive and higher in throughput."""
    pts = sorted(((1.0 / p["tpot_p50_s"], p["tok_s"] / max(gpus, 1)) for p in sweep
                  if p.get("tpot_p50_s") and p.get("success", 0) > 0), reverse=True)
    env, best = [], -1.0
    for x, y in pts:  # from the most interactive down: keep a point only if it raises throughput
        if y > best:
            env.append((x, y))
            best = y
    env.reverse()
    return Curve(label="", x=[x for x, _ in env], y=[y for _, y in env])


def offered(p: dict) -> float:
    """The rate a point was offered; a fixed-concurrency point has none, so its achieved rate."""
    return p["offered_rps"] if p.get("offered_rps") is not None else p["rps"]


class TtftSeries(BaseModel):
    rate: list[float]
    p50: list[float | None]
    p95: list[float | None]
    knee_rate: float | None = None  # offered rate of the knee's point
    knee_p95: float | None = None


def ttft(sweep: list[dict], slo_s: float) -> TtftSeries:
    """TTFT p50/p95 by offered rate; the knee is the point of highest achieved rate that meets
    the SLO with every request successful (tools.bench.metrics.knee's rule)."""
    pts = sorted(sweep, key=offered)
    ok = [p for p in pts if p.get("success", 0) >= 1.0 and p.get("ttft_p95_s") is not None
          and p["ttft_p95_s"] <= slo_s]
    k = max(ok, key=lambda p: (p["rps"], p["tok_s"])) if ok else None
    return TtftSeries(rate=[offered(p) for p in pts], p50=[p.get("ttft_p50_s") for p in pts],
                      p95=[p.get("ttft_p95_s") for p in pts],
                      knee_rate=offered(k) if k else None, knee_p95=k["ttft_p95_s"] if k else None)


class Band(BaseModel):
    phase: str
    start: float
    end: float


class TrialSeries(BaseModel):
    t: list[float]  # each trial's end, cumulative hours of ground time
    value: list[float | None]  # its objective (None: nothing measured)
    verdict: list[str]
    best_t: list[float]  # the running best as a step function: (time, value) at each kept trial
    best: list[float]
    bands: list[Band]
    unit: str  # "h" of ground time, or "trial" where no time was recorded


def trials(rows: list[dict]) -> TrialSeries:
    """rows: result.json's trials (id, phase, verdict, objective, ground_s). Time is the ground's
    (simulated on the sim, measured on real hardware): what the search spent to get there."""
    timed = any(r.get("ground_s") for r in rows)
    t, spans, now = [], [], 0.0
    for i, r in enumerate(rows):  # each trial's x and the span its phase band covers
        if timed:
            lo, now = now, now + (r.get("ground_s") or 0.0) / 3600
            t.append(now)
            spans.append((lo, now))
        else:
            t.append(i + 1.0)
            spans.append((i + 0.5, i + 1.5))
    best_t, best, cur = [], [], None
    for x, r in zip(t, rows):
        v = r.get("objective")
        if r.get("verdict") == "kept" and v is not None and (cur is None or v > cur):
            cur = v
        if cur is not None:
            best_t.append(x)
            best.append(cur)
    bands: list[Band] = []
    for (lo, hi), r in zip(spans, rows):
        if bands and bands[-1].phase == r["phase"]:
            bands[-1].end = hi
        else:
            bands.append(Band(phase=r["phase"], start=lo, end=hi))
    return TrialSeries(t=t, value=[r.get("objective") for r in rows], verdict=[r.get("verdict") or "" for r in rows],
                       best_t=best_t, best=best, bands=bands, unit="h" if timed else "trial")
