"""Requests the server refuses, all alike, end a load level at once (tools/bench/refusal.py), over
real HTTP on loopback: the mock server answers vLLM's own 400 for prompts past its context."""
from __future__ import annotations

import asyncio

from tools.bench.records import RequestRecord
from tools.bench.refusal import NOT_SENT, TRIP_AFTER, Breaker, refused, signature
from tools.bench.sweep import run_point
from tools.bench.workload import Workload
from tools.server import launch_process
from toolhelpers import mock_argv

READY = "Application startup complete."


def rec(i, ok=True, error=None):
    return RequestRecord(id=str(i), send_s=0.0, first_token_s=0.1 if ok else None, end_s=0.2, input_tokens=10,
                         output_tokens=4 if ok else 0, ok=ok, error=error)


def test_signature_ignores_each_requests_own_numbers():
    a = "RuntimeError: HTTP 400: context is 4096 tokens; your prompt contains 5001 input tokens"
    b = "RuntimeError: HTTP 400: context is 4096 tokens; your prompt contains 5017 input tokens"
    assert signature(a) == signature(b) and signature(a) != signature("RuntimeError: HTTP 500: boom")
    assert signature(f"{NOT_SENT}x") is None and signature(None) is None


def test_breaker_trips_only_on_identical_failures_before_any_success():
    b = Breaker()
    assert not b.add(False, "HTTP 400: a 1") and not b.add(False, "HTTP 400: a 2")
    assert b.add(False, "HTTP 400: a 3") and b.tripped
    mixed = Breaker()
    for e in ("HTTP 400: a", "HTTP 500: b", "HTTP 400: a", "HTTP 500: b"):
        assert not mixed.add(False, e)  # failures that differ are not one refusal
    served = Breaker()
    served.add(True, None)
    assert not any(served.add(False, "HTTP 400: a") for _ in range(10))  # the server did serve: not a refusal


def test_refused_level_names_status_and_message():
    err = "RuntimeError: HTTP 400: {\"error\": {\"message\": \"This model's maximum context length is 64\"}}"
    recs = [rec(i, False, err) for i in range(TRIP_AFTER)] + [rec(9, False, f"{NOT_SENT}tripped")]
    r = refused({"rate": 2.0}, recs)
    assert r.status == 400 and r.client_error and r.failed == TRIP_AFTER and r.not_sent == 1
    assert "maximum context length is 64" in str(r) and "rate 2" in str(r)
    assert r.diagnosis()["kind"] == "requests_refused"
    assert refused({"rate": 2.0}, recs[:-1] + [rec(9)]) is None  # one success: a measurement, not a refusal


def test_http_client_stops_sending_after_identical_refusals(tmp_path):
    from tools.bench.client import OpenAIClient
    with launch_process(mock_argv("--max-model-len", "64"), run_dir=tmp_path, model="m", ready_line=READY,
                        timeout_s=30) as s:
        client = OpenAIClient(s.url, "m")
        p, recs = asyncio.run(run_point(client, Workload(input_len=200, output_len=8, prefix_hit=0.0), n=40,
                                        rate=20.0, seed=1))
        log = s.log_text()
    assert p.success == 0 and len(recs) == 40
    sent = log.count("refused request ")
    assert TRIP_AFTER <= sent < 12, sent  # a handful, not all 40
    assert sum(r.error.startswith(NOT_SENT) for r in recs) == 40 - sent
    r = refused({"rate": 20.0}, recs)
    assert r is not None and r.status == 400 and "maximum context length is 64 tokens" in r.message


def test_a_workload_that_fits_is_served_in_full(tmp_path):
    from tools.bench.client import OpenAIClient
    with launch_process(mock_argv("--max-model-len", "64"), run_dir=tmp_path, model="m", ready_line=READY,
                        timeout_s=30) as s:
        p, recs = asyncio.run(run_point(OpenAIClient(s.url, "m"), Workload(input_len=10, output_len=4,
                                                                           prefix_hit=0.0), n=12, rate=50.0))
    assert p.success == 1.0 and all(r.ok for r in recs)
