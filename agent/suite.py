"""The eval suite a run measures with: the evals package's default tasks for the model and node,
narrowed to `measure.eval_tasks` when the config names some. Below agent/run.py, so a Ray worker
(agent/worker.py) builds the same suite without importing the run's driver."""
from __future__ import annotations

from agent.config import RunConfig
from agent.errors import BadInput


def default_suite(cfg: RunConfig, card, hw, sandbox):
    """The eval tasks for this run (tools.evals), narrowed to measure.eval_tasks when given."""
    from tools.evals import suite_for  # the evals package names its default tasks
    suite = suite_for(cfg, card, hw)
    want = cfg.measure.eval_tasks
    if want is not None:
        have = [t.name for t in suite.tasks]
        bad = [w for w in want if w not in have]
        if bad or not want:
            raise BadInput(f"measure.eval_tasks {want!r}: allowed here: {', '.join(have)}")
        suite.tasks = [t for t in suite.tasks if t.name in want]
    return suite
