"""The estimate's sweep runs over any Client (here a tiny fake with a known capacity), so it
cannot depend on the simulator's internals."""
import asyncio

import pytest

from sandboxes.sim.estimate import estimate
from tests.fake_clients import CapacityClient as _Capacity
from tools.bench.workload import Workload


def CapacityClient(cap):
    """A server that serves `cap` requests/s: below it TTFT is 0.2 s, above it the queue grows."""
    return _Capacity(cap, ttft_s=0.2, decode_s=1.0)


@pytest.mark.parametrize("cap", [0.8, 3.0])
def test_knee_search_finds_a_fake_servers_capacity(cap):
    res = asyncio.run(estimate(CapacityClient(cap), Workload(), ttft_slo_s=5.0, duration_s=120.0))
    assert res.knee is not None
    assert cap * 0.75 <= res.knee.rps <= cap * 1.1
    assert len(res.sweep) >= 5 and res.single_stream_tok_s > 0


def test_fixed_rates_and_concurrency():
    res = asyncio.run(estimate(CapacityClient(2.0), Workload(), rates=[0.5, 1.0], single_stream=False))
    assert [p.offered_rps for p in res.sweep] == [0.5, 1.0] and res.single_stream_tok_s is None
    res = asyncio.run(estimate(CapacityClient(2.0), Workload(), concurrency=4, single_stream=False))
    assert res.sweep[0].concurrency == 4
