"""A hostile scripted LLM (real HTTP on loopback, the real openai client) drives a sim run: a
regex that backtracks forever, a read of the sim's log, a proposal that preloads a shared object
and puts its own code first on PYTHONPATH, with escape sequences in its rationale. The run stays
bounded, nothing it proposed runs unreviewed, and the key reaches no file of the run."""
import json
import time

from agent.config import LLMBounds
from agent.run import start
from agent.ledger import Ledger
from agent.review_gate import REVIEW_FIX
from tests.faults.runner import config
from tests.planners.hung_server import HungServer
from tests.planners.scripted_openai import ScriptedOpenAI, reply, tool_results

KEY = "sk-hostile-test-key-0123456789"
EVIL_ENV = {"LD_PRELOAD": "/tmp/evil.so", "PYTHONPATH": "/tmp/evil"}


def test_hostile_llm_is_bounded_reviewed_and_kept_away_from_secrets(tmp_path, monkeypatch, agent):
    script = [reply([("grep_source", {"framework": "sglang", "pattern": r"(\w|\w)+\(\)"})]),
              reply([("read_log", {"trial_id": 1})]),
              reply([("propose_config", {"env": EVIL_ENV, "rationale": "\x1b[2K\x1b[1Gharmless \u202eevil"})])]
    with ScriptedOpenAI(script) as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        cfg = config("trials").model_copy(update={"approve": "ask", "planner": "llm", "llm_model": "scripted"})
        t0 = time.monotonic()
        out = start(cfg, tmp_path / "run")
        took = time.monotonic() - t0
        grep_result = tool_results(srv.requests[1])[-1]
        log_result = tool_results(srv.requests[2])[-1]
    # item 7: the pattern answers in bounded time (tests/planners/test_bounded_grep.py: a truly
    # catastrophic one is cut off at the deadline)
    assert took < 60 and ("deepseek_nextn.py" in grep_result or "stopped after" in grep_result)
    assert "server log, trial 1, 0 lines" not in log_result and "Load weight" in log_result  # item 14: read_log finds the sim log
    assert out["status"] == "waiting_for_review" and out["waiting"]["patch"].endswith(REVIEW_FIX)
    led = Ledger(tmp_path / "run")
    evil = [t for t in led.trials() if t["candidate"]["env"].get("LD_PRELOAD")]
    assert evil and all(t["started"] is None for t in evil)  # proposed, never launched
    r = agent("approvals", str(tmp_path / "run"))
    assert "env LD_PRELOAD=" in r.stdout and "\x1b" not in r.stdout
    for f in (tmp_path / "run").rglob("*"):
        if f.is_file():
            assert KEY.encode() not in f.read_bytes(), f
    assert KEY not in json.dumps(led.events())


def test_a_hung_llm_server_is_switched_off_and_the_run_goes_on(tmp_path, monkeypatch):
    """Issue 13 item 14: a server that accepts and never answers cost 245 s on every decision. With
    the run's bounds (--config `llm:`), it costs breaker_after decisions x (retries + 1) calls, each
    ended by the read timeout; then the built-in planner decides every step and says why."""
    bounds = LLMBounds(timeout_s=0.2, retries=1, breaker_after=2)
    with HungServer() as srv:
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        cfg = config("trials").model_copy(update={"planner": "llm", "llm_model": "scripted", "llm": bounds})
        out = start(cfg, tmp_path / "run")
    assert out["status"] == "done"
    led = Ledger(tmp_path / "run")
    asked = [json.loads(e["message"]) for e in led.events() if e["kind"] == "llm"]
    assert srv.calls == 4 and [e["calls"] for e in asked[:2]] == [2, 2]  # all the waiting there was
    off = "stopped calling the API for the rest of the run after 2 consecutive decisions"
    assert len(asked) > 3 and all(e["outcome"].startswith(f"skipped: {off}") and e["calls"] == 0 for e in asked[2:])
    later = led.trials()[3:]
    assert len(led.trials()) >= 8 and all(off in t["rationale"] for t in later)
