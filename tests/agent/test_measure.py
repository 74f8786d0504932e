"""The loop measures through tools.bench.sweep: the knee search finds a capacity it was not told,
walks down when even the first rate breaks; one measurement records knee, single stream and sweep."""
import asyncio
from types import SimpleNamespace

import pytest

from agent.measure import bench
from tests.agent.conftest import small_config
from tests.agent.fakes import FakeClient
from tools.bench.metrics import knee, meets_slo
from tools.bench.sweep import knee_search
from tools.bench.workload import Workload

W = Workload(input_len=100, output_len=10, prefix_hit=0.0)


@pytest.mark.parametrize("cap", [0.3, 1.1, 2.6, 7.0])
def test_knee_search_brackets_an_unknown_capacity(cap):
    pts = asyncio.run(knee_search(FakeClient(cap, 50.0, {}), W, ttft_slo_s=5.0, n=16, start_rps=0.25,
                                  growth=2.0, refine=4, max_points=20))
    best = max(p.offered_rps for p in pts if meets_slo(p, 5.0))
    # FakeClient's TTFT passes 5 s up to ~1.2 x capacity (achieved rate); bisection narrows the bracket
    # to 1/16 (16 Poisson arrivals per point are noisy): the best passing rate lands near the
    # capacity though the search was never told it.
    assert cap * 0.7 <= best <= cap * 1.4, (cap, [p.offered_rps for p in pts])
    assert knee(pts, 5.0) is not None
    assert [p.offered_rps for p in pts] == sorted(p.offered_rps for p in pts)


def test_knee_search_walks_down_when_the_first_rate_breaks():
    pts = asyncio.run(knee_search(FakeClient(0.1, 50.0, {}), W, ttft_slo_s=5.0, n=16, start_rps=2.0,
                                  refine=2, max_points=12))
    assert pts[-1].offered_rps == 2.0 and knee(pts, 5.0).rps < 0.13


def test_nothing_meets_the_slo_gives_no_knee_and_stops():
    pts = asyncio.run(knee_search(FakeClient(1e-4, 50.0, {}), W, ttft_slo_s=5.0, n=8, start_rps=1.0,
                                  max_points=30, min_rps=0.05))
    assert knee(pts, 5.0) is None and len(pts) == 5  # 1, 0.5, 0.25, 0.125, 0.0625; then the floor


def test_bench_records_knee_single_stream_and_sweep():
    server = SimpleNamespace(client=FakeClient(1.5, 40.0, {}), url=None)
    cfg = small_config()
    d = bench(server, cfg, SimpleNamespace(usd_per_gpu_h=2.0, tdp_w=1400), 8, seed=3)
    assert d["knee_rps"] == pytest.approx(max(p["rps"] for p in d["sweep"] if p["ttft_p95_s"] <= 5.0))
    assert d["single_stream_tok_s"] == pytest.approx(20 / (0.5 + 20 / 40.0), rel=0.05)  # TTFT 0.5 s + decode
    assert d["gpus"] == 8 and d["usd_per_gpu_h"] == 2.0 and d["evals"] is None


def _warm(n: int, duration_s: float, success: float = 1.0):
    from tools.bench.metrics import SweepPoint
    return SweepPoint(rps=n * success / duration_s, concurrency=n, tok_s=0.0, total_tok_s=0.0, ttft_p50_s=None,
                      ttft_p95_s=None, tpot_p50_s=None, success=success, n=n, duration_s=duration_s)


def test_the_sweep_starts_at_the_first_grid_rate_at_or_above_what_the_warmup_carried():
    from agent.config import Measure
    from agent.measure import first_rate
    m = Measure(start_rps=0.25, growth=2.0, start_from_warmup=True)
    assert first_rate(m, _warm(4, 2.4)) == 2.0  # 1.67 req/s carried: 1 is below it, 2 the first grid rate above
    assert first_rate(m, _warm(4, 0.5)) == 8.0  # exactly on the grid
    assert first_rate(m, _warm(4, 40.0)) == 0.25  # a slow warmup never starts below start_rps
    assert first_rate(m, _warm(4, 2.4, success=0.75)) == 0.25  # a request failed: the warmup proves nothing


def test_a_sweep_from_the_warmup_skips_the_low_levels_and_finds_the_same_knee():
    cfg = small_config()
    cfg.measure.max_points = 20  # room for the whole bisection either way
    hw = SimpleNamespace(usd_per_gpu_h=2.0, tdp_w=1400)
    full = bench(SimpleNamespace(client=FakeClient(7.0, 40.0, {}), url=None), cfg, hw, 8, seed=3)
    cfg.measure.start_from_warmup = True
    fast = bench(SimpleNamespace(client=FakeClient(7.0, 40.0, {}), url=None), cfg, hw, 8, seed=3)
    rates = lambda d: sorted(p["offered_rps"] for p in d["sweep"])  # noqa: E731
    # the fake's warmup (4 at once) carries ~5 req/s: the sweep starts at 8, the first grid rate above,
    # misses the SLO there and walks down to 4; it never spends points at 0.25, 0.5, 1 and 2
    assert rates(full)[0] == 0.25 and rates(fast)[0] == 4.0, (rates(full), rates(fast))
    assert fast["knee_rps"] == pytest.approx(full["knee_rps"], rel=0.3)  # the knee lies where it did
    assert {4.0, 8.0} <= set(rates(fast)) & set(rates(full))  # from there, the same doubling grid
