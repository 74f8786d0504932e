"""Fixtures: a playbook recorded by a real loop run on the fake ground (tests/agent/fakes.py),
recorded once per session; replays run the same loop with the replay planner."""
from __future__ import annotations

from pathlib import Path

import pytest

from agent.run import start
from agent.replay import replay
from agent.config import Target
from agent.ledger import Ledger
from tests.agent.conftest import fake_factory, fake_suite, small_config

REPO = Path(__file__).resolve().parents[2]


def config(model: str = "glm-5.2", hw: str = "mi355x", **kw):
    # 60 requests per sweep point: the fake's knee is then stable enough that a step's gain is
    # not lost to arrival noise (8 requests, the loop tests' setting, flips small gains).
    m = small_config().measure.model_copy(update={"requests_per_point": 60})
    return small_config(target=Target(model=model, hw=hw), measure=m, **kw)


class Recorded:
    def __init__(self, run_dir: Path, out: dict):
        self.run_dir, self.out = run_dir, out
        led = Ledger(run_dir)
        self.launched = led.launched_count()
        led.close()
        self.playbook = run_dir / "playbook.yaml"


@pytest.fixture(scope="session")
def recorded(tmp_path_factory) -> Recorded:
    d = tmp_path_factory.mktemp("recorded") / "run"
    out = start(config(), d, sandbox_factory=fake_factory(), suite_factory=fake_suite)
    return Recorded(d, out)


def do_replay(playbook, model, hw, run_dir, **kw):
    return replay(playbook, config(model, hw, **kw), run_dir, sandbox_factory=fake_factory(), suite_factory=fake_suite)


def config_of(best: dict) -> dict:
    """What 'the same configuration' means across runs: patch ids and tuned-config paths are
    run-specific, so patches compare by their fix and MoE tuning by whether it is in effect."""
    return {"framework": best["framework"], "weights": best["weights"], "parallel": best["parallel"],
            "flags": best["flags"], "patches": sorted(p.split("-", 1)[1] for p in best["patches"]),
            "moe_tuned": bool(best["moe_configs"])}
