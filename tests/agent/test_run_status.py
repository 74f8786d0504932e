"""The run's status: one typed set of states (agent/records.py RunStatus), moved by agent/run.py
while it drives the graph; resuming a run that already ended leaves its ending as it was."""
import pytest

from agent.ledger import Ledger
from agent.run import resume
from tests.agent.conftest import fake_suite
from tests.agent.test_first_real_run import Ground, run


def test_an_unknown_status_is_refused(tmp_path):
    led = Ledger(tmp_path, create=True)
    with pytest.raises(ValueError, match="allowed: running, waiting_for_review, interrupted, done"):
        led.set_status("finished")
    led.set_status("interrupted")
    assert led.status() == "interrupted"


def test_resuming_a_failed_run_leaves_it_failed(tmp_path):
    ground = lambda card, hw: Ground(card, hw, free_fraction=0.0)  # noqa: E731  the baseline never starts
    out, led, _ = run(tmp_path, ground)
    assert out["status"] == "failed" and led.status() == "failed"
    n = led.launched_count()
    again = resume(tmp_path / "run", sandbox_factory=lambda cfg, card, hw: ground(card, hw), suite_factory=fake_suite)
    assert again["status"] == "failed" and Ledger(tmp_path / "run").status() == "failed"
    assert Ledger(tmp_path / "run").launched_count() == n  # nothing ran again

