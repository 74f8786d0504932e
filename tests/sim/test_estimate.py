"""The estimate's sweep runs over any Client (here a tiny fake with a known capacity), so it
cannot depend on the simulator's internals."""
import asyncio

import pytest

from sandboxes.sim.estimate import estimate
from tools.bench.records import RequestRecord
from tools.bench.workload import Workload


class CapacityClient:
    """A server that serves `cap` requests/s: below it TTFT is 0.2 s, above it the queue grows."""

    def __init__(self, cap: float):
        self.cap = cap

    async def run(self, specs, *, concurrency=None):
        out, free = [], 0.0
        for s in specs:
            start = max(s.arrival_s, free)
            free = start + 1.0 / self.cap
            first = start + 0.2
            out.append(RequestRecord(id=s.id, send_s=s.arrival_s, first_token_s=first, end_s=first + 1.0,
                                     input_tokens=s.input_tokens, output_tokens=s.output_tokens, ok=True))
        return out

    async def complete(self, prompts, *, max_tokens=256, temperature=0.0, seed=0):
        return ["" for _ in prompts]


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
