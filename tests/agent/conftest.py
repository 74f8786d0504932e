import pytest

from agent.config import Measure, RunConfig, Target, Budget
from tools.bench.workload import Workload
from tests.agent.fakes import FakeSandbox, FakeSuite


def small_config(**kw) -> RunConfig:
    m = Measure(workload=Workload(input_len=100, output_len=10, prefix_hit=0.0),
                single_stream=Workload(input_len=100, output_len=20, prefix_hit=0.0),
                requests_per_point=8, duration_s=4.0, start_rps=0.25, max_points=8, bisect_steps=3,
                single_stream_requests=2, eval_items=100)
    base = dict(target=Target(model="glm-5.2", hw="mi355x"), backend="sim", approve="auto",
                budget=Budget(trials=40), measure=m)
    base.update(kw)
    return RunConfig(**base)


def fake_factory(**opts):
    made = []

    def f(cfg, card, hw):
        s = FakeSandbox(card, hw, **opts)
        made.append(s)
        return s
    f.made = made
    return f


def fake_suite(cfg, card, hw, sandbox):
    return FakeSuite()


@pytest.fixture
def small():
    return small_config
