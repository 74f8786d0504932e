"""The LLM planner against a scripted OpenAI-compatible server on loopback (real HTTP, the real
`openai` client): tool calls, malformed arguments, 429/500 then success, a timeout, the bounds,
and the fallback to the built-in planner."""
from __future__ import annotations

import json
import socket

from agent.planners.llm import LLMPlanner
from tests.planners.behaviours import mtp_fixer
from tests.planners.conftest import KEY, MISMATCH
from tests.planners.scripted_openai import ScriptedOpenAI, delay, reply, status, tool_results


def planner(srv_url: str, **kw) -> tuple[LLMPlanner, list[dict], list[str]]:
    events, said = [], []
    kw = {"retries": 3, "backoff_s": 0.001, "timeout_s": 5.0, **kw}
    p = LLMPlanner(model="scripted-model", base_url=srv_url, api_key=KEY, record=events.append,
                   notify=said.append, **kw)
    return p, events, said


SPEC_FLAGS = {"--speculative-algorithm": None, "--speculative-num-steps": None, "--speculative-eagle-topk": None,
              "--speculative-num-draft-tokens": None}


def test_tool_calls_read_the_run_then_propose(ctx, tmp_path):
    script = [reply([("read_log", {"trial_id": 2})]),
              reply([("list_trials", {}), ("flag_schema", {"framework": "sglang", "filter": "kv-cache"})]),
              reply([("propose_config", {"flags": {**SPEC_FLAGS, "--kv-cache-dtype": "fp8_e4m3"},
                                         "rationale": "drop MTP, shrink the KV cache"})])]
    with ScriptedOpenAI(script) as srv:
        p, events, _ = planner(srv.base_url, run_dir=tmp_path / "run")
        prop = p.propose(ctx)
    assert prop.kind == "config" and prop.fixes_trial == 2 and prop.phase == "speculative"
    assert prop.candidate.flags == {"--kv-cache-dtype": "fp8_e4m3"}
    assert prop.description.startswith("LLM: ")
    # What the model was shown came back over HTTP: the log, wrapped as untrusted data.
    log_result = tool_results(srv.requests[1])[0]
    assert log_result.startswith('<untrusted-data source="server log, trial 2') and MISMATCH in log_result
    assert log_result.rstrip().endswith("</untrusted-data>")
    listed = json.loads(tool_results(srv.requests[2])[-2])
    assert [t["id"] for t in listed] == [1, 2] and listed[0]["incumbent"] is True
    assert "--kv-cache-dtype" in tool_results(srv.requests[2])[-1]
    assert srv.requests[0]["model"] == "scripted-model" and srv.requests[0]["tools"]
    assert srv.headers[0]["authorization"] == f"Bearer {KEY}"
    (e,) = events
    assert e["outcome"] == "proposal:config" and e["turns"] == 3 and e["prompt_tokens"] > 0
    assert e["tools"] == ["read_log", "list_trials", "flag_schema", "propose_config"]
    assert KEY not in json.dumps(e)


def test_malformed_arguments_are_told_back_and_corrected(ctx, tmp_path):
    script = [reply([("propose_config", '{"flags": {"--kv-cache-dtype": ')]),
              reply([("propose_config", {"flags": {"--no-such-flag": 1}, "rationale": "x"})]),
              reply([("propose_config", {"flags": {**SPEC_FLAGS, "--kv-cache-dtype": "fp8_e4m3"}, "rationale": "y"})])]
    with ScriptedOpenAI(script) as srv:
        p, events, _ = planner(srv.base_url)
        prop = p.propose(ctx)
    assert prop.kind == "config" and prop.candidate.flags == {"--kv-cache-dtype": "fp8_e4m3"}
    assert "not a valid JSON object" in tool_results(srv.requests[1])[-1]
    assert "invalid configuration" in tool_results(srv.requests[2])[-1] and "--no-such-flag" in tool_results(srv.requests[2])[-1]


def test_429_then_500_then_success_retries_with_backoff(ctx):
    slept = []
    with ScriptedOpenAI([status(429), status(500), reply([("stop", {"reason": "all done"})])]) as srv:
        p, events, _ = planner(srv.base_url, backoff_s=0.5, sleep=slept.append)
        prop = p.propose(ctx)
    assert prop.kind == "stop" and "all done" in prop.rationale
    assert len(srv.requests) == 3 and slept == [0.5, 1.0]  # exponential backoff between attempts
    assert events[0]["retries"] == 2


def test_a_timeout_is_retried(ctx):
    # The timeout leaves a loaded 2-core CI machine a second for the prompt reply (0.3 s did not).
    with ScriptedOpenAI([delay(2.5, reply([("stop", {"reason": "late"})])), reply([("stop", {"reason": "on time"})])]) as srv:
        p, events, _ = planner(srv.base_url, timeout_s=1.0)
        prop = p.propose(ctx)
    assert "on time" in prop.rationale and len(srv.requests) == 2 and events[0]["retries"] == 1


def test_api_down_falls_back_to_the_builtin_planner_and_says_so(ctx):
    with ScriptedOpenAI([status(500)] * 4) as srv:
        p, events, said = planner(srv.base_url, retries=3)
        prop = p.propose(ctx)
    assert len(srv.requests) == 4
    assert prop.rationale.startswith("[built-in planner, because the LLM planner could not be reached")
    assert not prop.description.startswith("LLM")
    assert events[0]["outcome"].startswith("could not be reached") and "InternalServerError" in events[0]["outcome"]
    assert said and "built-in planner decides" in said[0]


def test_nothing_listening_falls_back(ctx):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # a port with nothing behind it: connection refused
    p, events, _ = planner(f"http://127.0.0.1:{port}/v1", retries=1)
    prop = p.propose(ctx)
    assert "could not be reached" in prop.rationale and "APIConnectionError" in events[0]["outcome"]


def test_a_client_error_is_not_retried(ctx):
    with ScriptedOpenAI([status(401), reply([("stop", {"reason": "never reached"})])]) as srv:
        p, events, _ = planner(srv.base_url)
        prop = p.propose(ctx)
    assert len(srv.requests) == 1 and "could not be reached" in prop.rationale


def test_turns_are_bounded(ctx):
    with ScriptedOpenAI([reply([("model_card", {})])], repeat_last=True) as srv:
        p, events, _ = planner(srv.base_url, max_turns=4)
        prop = p.propose(ctx)
    assert len(srv.requests) == 4
    assert "gave no valid proposal within 4 turns" in prop.rationale


def test_tokens_are_bounded(ctx):
    with ScriptedOpenAI([reply([("hardware_profile", {})])], repeat_last=True) as srv:
        p, events, _ = planner(srv.base_url, max_tokens=1500, max_turns=50)
        prop = p.propose(ctx)
    assert len(srv.requests) < 50 and "token budget (1500)" in prop.rationale
    assert events[0]["prompt_tokens"] + events[0]["completion_tokens"] >= 1500


def test_a_model_that_reads_log_and_source_writes_a_patch_proposal(ctx, tmp_path):
    with ScriptedOpenAI([mtp_fixer] * 6) as srv:
        p, events, _ = planner(srv.base_url, run_dir=tmp_path / "run", price_per_mtok=(2.0, 8.0))
        prop = p.propose(ctx)
    assert prop.kind == "patch" and prop.fixes_trial == 2 and prop.patch.fix == "llm"
    assert prop.patch.files == ["python/sglang/srt/models/deepseek_nextn.py"]
    assert '+        "model.layers.78.eh_proj": "model.eh_proj",' in prop.patch.diff
    assert prop.candidate.flags["--speculative-algorithm"] == "NEXTN"  # the failed candidate, to retry
    assert events[0]["tools"] == ["grep_log", "grep_source", "read_source", "propose_patch"]
    e = events[0]
    assert e["cost_usd"] == round(e["prompt_tokens"] * 2e-6 + e["completion_tokens"] * 8e-6, 6) > 0


def test_a_turned_down_patch_is_not_proposed_again(tmp_path):
    from tests.planners.conftest import make_ctx
    ctx = make_ctx(tmp_path / "run")
    with ScriptedOpenAI([mtp_fixer] * 6) as srv:
        first = planner(srv.base_url, run_dir=tmp_path / "run")[0].propose(ctx)
    ctx2 = make_ctx(tmp_path / "run", rejected={first.patch.key: "wrong layer"})
    with ScriptedOpenAI([mtp_fixer] * 4 + [reply([("stop", {"reason": "no other idea"})])]) as srv:
        prop = planner(srv.base_url, run_dir=tmp_path / "run")[0].propose(ctx2)
    assert "turned down before: wrong layer" in tool_results(srv.requests[4])[-1]
    assert prop.kind == "stop"


# ---- time bounds (issue 13: a hung server cost 245 s per decision) ---------------------------------
def test_a_hung_server_is_given_up_on_after_two_decisions_for_the_rest_of_the_run(ctx):
    from tests.planners.hung_server import HungServer
    with HungServer() as srv:
        p, events, said = planner(srv.base_url, timeout_s=0.2, retries=1, breaker_after=2)
        props = [p.propose(ctx) for _ in range(4)]
    # 2 decisions x 2 attempts reached the server, each ended by its 0.2 s read timeout; none after
    assert srv.calls == 4 and all(r.startswith(b"POST /v1/chat/completions") for r in srv.requests)
    assert [e["calls"] for e in events] == [2, 2, 0, 0]
    assert all("could not be reached (APITimeoutError" in e["outcome"] for e in events[:2])
    off = "stopped calling the API for the rest of the run after 2 consecutive decisions in which it could not answer"
    assert all(e["outcome"].startswith(f"skipped: {off}") for e in events[2:])
    assert all(x.rationale.startswith(f"[built-in planner, because the LLM planner {off}") for x in props[2:])
    assert sum(off in s for s in said) == 3  # said once when it switched off, then once per skipped decision


def test_the_decision_deadline_ends_a_call_whose_server_trickles(ctx):
    from tests.planners.hung_server import HungServer
    # every read gets a byte within 0.05 s, so the 5 s read timeout never fires: only the deadline can
    with HungServer(trickle=True) as srv:
        p, events, _ = planner(srv.base_url, timeout_s=5.0, decision_timeout_s=0.5, retries=3)
        prop = p.propose(ctx)
    assert srv.calls == 1 and events[0]["calls"] == 1
    assert srv.dripped[0] < srv.drops  # the decision ended while the server was still answering
    assert "no answer within the decision's deadline of 0.5 s" in events[0]["outcome"]
    assert "could not be reached" in prop.rationale


def test_after_its_cool_down_the_breaker_lets_one_decision_probe_the_api(ctx):
    now = [0.0]
    script = [status(401), status(401), reply([("stop", {"reason": "back"})]), status(401)]
    with ScriptedOpenAI(script) as srv:
        p, events, _ = planner(srv.base_url, breaker_after=2, breaker_cooldown_s=100.0, clock=lambda: now[0])
        first = [p.propose(ctx) for _ in range(3)]  # two failures switch it off; the third is not sent
        assert len(srv.requests) == 2 and "stopped calling the API for 100 s" in first[2].rationale
        now[0] = 100.0
        back = p.propose(ctx)  # the probe succeeds: closed again
        again = p.propose(ctx)  # a failure after a success does not switch it off at once
    assert "back" in back.rationale and len(srv.requests) == 4
    assert "could not be reached" in again.rationale and p.breaker.allows()


def test_a_failed_probe_switches_the_api_off_again():
    from agent.planners.llm_bounds import Breaker
    now = [0.0]
    b = Breaker(3, cooldown_s=10.0, clock=lambda: now[0])
    assert not b.failed("a") and not b.failed("b") and b.failed("c") and not b.allows()
    now[0] = 10.0
    assert b.allows()  # the probe
    assert b.failed("d") and not b.allows() and "last: d" in b.reason()
