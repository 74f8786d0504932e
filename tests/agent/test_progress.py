"""agent/progress.py: rich bars with ETA on a terminal, plain lines through the "inferloop"
logger otherwise; lines logged while a bar is up print above it."""
import io
import logging

import pytest

from agent import progress


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def lines():
    log = logging.getLogger("inferloop")
    h, before = Lines(), log.level
    log.addHandler(h)
    log.setLevel(logging.INFO)
    yield h.lines
    log.removeHandler(h)
    log.setLevel(before)


def test_plain_lines_off_a_terminal(lines, monkeypatch):
    monkeypatch.delenv("INFERLOOP_PROGRESS", raising=False)
    with progress.task("sweep", 3, "req", stream=io.StringIO()) as bar:  # a StringIO is no terminal
        for _ in range(3):
            bar.advance()
    assert lines[0] == "sweep: started (3 req)"
    assert lines[-1].startswith("sweep: 3 req in ") and "req/s" in lines[-1]


def test_rich_bar_with_eta_on_a_terminal(lines, monkeypatch):
    monkeypatch.setenv("INFERLOOP_PROGRESS", "rich")
    out = io.StringIO()
    with progress.task("eval gsm8k", 4, "items", stream=out) as bar:
        logging.getLogger("inferloop").info("level rate 1: 4 requests")
        for _ in range(4):
            bar.advance()
    text = out.getvalue()
    assert "eval gsm8k" in text and "4/4" in text and "ETA" in text
    assert "level rate 1: 4 requests" in text  # routed through the bar's console, not torn by it
    assert lines == []  # and not also printed as a plain line
    assert progress.rich_wanted(io.StringIO()) is True  # the override wins over the terminal check


def test_optimize_on_a_terminal_shows_a_trials_bar_with_eta(agent, monkeypatch, tmp_path):
    monkeypatch.setenv("INFERLOOP_PROGRESS", "rich")
    r = agent("optimize", "--model", "glm-5.2", "--hw", "mi355x", "--budget", "3", "--approve", "auto",
              "--json", "--run-dir", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr
    assert "trials" in r.stderr and "3/3" in r.stderr and "ETA" in r.stderr
    assert "launching vllm bf16 TP8xDP1 ..." in r.stderr  # the run's own lines still show, above the bar
