"""When the hybrid planner calls the LLM: only for a failure the catalogue does not answer and for a
stalled phase; otherwise the built-in plan stands and no request is made."""
from __future__ import annotations

from agent.planners.base import Proposal
from agent.planners.hybrid import HybridPlanner
from agent.planners.llm import LLMPlanner
from tests.planners.conftest import KEY, make_ctx, trial
from tests.planners.scripted_openai import ScriptedOpenAI, reply
from tools.candidate import Candidate, Parallel


class Plan:
    """A built-in planner stand-in that always proposes the same thing (obeys the Planner protocol)."""
    name = "stub"

    def __init__(self, p: Proposal):
        self.p = p

    def propose(self, ctx):
        return self.p


def llm(url):
    return LLMPlanner(model="m", base_url=url, api_key=KEY, backoff_s=0.001)


C = Candidate(framework="sglang", weights="mxfp4", parallel=Parallel(tp=8))
NEXT_PARALLEL = Proposal(kind="config", phase="parallel", description="TP4 x DP2",
                         candidate=C.model_copy(update={"parallel": Parallel(tp=4, dp=2)}))
KV = {"flags": {"--speculative-algorithm": None, "--speculative-num-steps": None, "--speculative-eagle-topk": None,
                "--speculative-num-draft-tokens": None, "--kv-cache-dtype": "fp8_e4m3"}, "rationale": "r"}


def test_a_failure_the_catalogue_answers_never_reaches_the_llm(tmp_path):
    known = Proposal(kind="config", phase="speculative", description="retry with drop_bad_flag", fixes_trial=2,
                     candidate=C)
    with ScriptedOpenAI([]) as srv:
        p = HybridPlanner(llm(srv.base_url), Plan(known)).propose(make_ctx(tmp_path / "run"))
    assert p is known and srv.requests == []


def test_an_unknown_failure_is_put_to_the_llm_once(tmp_path):
    ctx = make_ctx(tmp_path / "run")
    with ScriptedOpenAI([reply([("propose_config", KV)]), reply([("stop", {"reason": "none"})])]) as srv:
        h = HybridPlanner(llm(srv.base_url), Plan(NEXT_PARALLEL))
        p = h.propose(ctx)
        assert p.description.startswith("LLM: ") and p.fixes_trial == 2
        assert "built-in fix catalogue has no answer" in srv.requests[0]["messages"][1]["content"]
        p2 = h.propose(ctx)  # same state again: not asked twice
    assert p2 is NEXT_PARALLEL and len(srv.requests) == 1 + 1  # the second request is the stall question
    assert "has stalled" in srv.requests[1]["messages"][1]["content"]


def test_an_llm_stop_leaves_the_builtin_plan(tmp_path):
    with ScriptedOpenAI([reply([("stop", {"reason": "cannot fix"})]), reply([("stop", {"reason": "no"})])]) as srv:
        p = HybridPlanner(llm(srv.base_url), Plan(NEXT_PARALLEL)).propose(make_ctx(tmp_path / "run"))
    assert p is NEXT_PARALLEL


def test_a_rejected_llm_fix_gets_one_more_attempt_then_no_more(tmp_path):
    ctx = make_ctx(tmp_path / "run")
    ctx.trials.append(trial(3, "speculative", C, "rejected", kind="patch", fixes=2,
                            description="LLM patch sglang: x", source="llm", reason="patch p01-llm rejected by human: wrong file"))
    with ScriptedOpenAI([reply([("stop", {"reason": "no"})])], repeat_last=True) as srv:
        HybridPlanner(llm(srv.base_url), Plan(NEXT_PARALLEL)).propose(ctx)
        assert "wrong file" in srv.requests[0]["messages"][1]["content"]  # the reason reaches the model
        n = len(srv.requests)
        ctx.trials.append(trial(4, "speculative", C, "rejected", kind="patch", fixes=2, description="LLM patch sglang: y", source="llm"))
        HybridPlanner(llm(srv.base_url), Plan(NEXT_PARALLEL)).propose(ctx)
        fix_questions = [b for b in srv.requests if "fix catalogue has no answer" in b["messages"][1]["content"]]
    assert n >= 1 and len(fix_questions) == 1  # attempts (2) used up: only the stall question is asked


def test_a_stalled_phase_asks_the_llm_once_per_phase(tmp_path):
    ctx = make_ctx(tmp_path / "run")
    ctx.trials[1] = trial(2, "flags", C.model_copy(update={"flags": {"--kv-cache-dtype": "fp8_e4m3"}}), "reverted")
    with ScriptedOpenAI([reply([("propose_config", {"flags": {"--chunked-prefill-size": 4096}, "rationale": "r"})])]) as srv:
        h = HybridPlanner(llm(srv.base_url), Plan(NEXT_PARALLEL))
        p = h.propose(ctx)
        p2 = h.propose(ctx)
    assert p.description.startswith("LLM") and p.candidate.flags["--chunked-prefill-size"] == 4096
    assert p2 is NEXT_PARALLEL and len(srv.requests) == 1
    assert "The flags phase has stalled" in srv.requests[0]["messages"][1]["content"]


def test_progress_is_not_a_stall(tmp_path):
    ctx = make_ctx(tmp_path / "run")
    ctx.trials[1] = trial(2, "flags", C, "kept")
    with ScriptedOpenAI([]) as srv:
        p = HybridPlanner(llm(srv.base_url), Plan(NEXT_PARALLEL)).propose(ctx)
    assert p is NEXT_PARALLEL and srv.requests == []
