"""tools/bench/vllm_json.py: our records as vLLM's `bench serve` result JSON, checked field by field
against vLLM's definitions (vllm/benchmarks/serve.py) on hand-made records."""
import json

import pytest

from tools.bench import vllm_json
from tools.bench.records import RequestRecord

# Two requests: 4 tokens at 1.0, 1.1, 1.2, 1.4 s (sent at 0, done 1.4 s); 3 tokens at 2.0, 2.5, 3.0
# (sent at 0.5, done 3.0 s); one failed request that returned nothing.
RECS = [RequestRecord(id=0, send_s=0.0, first_token_s=1.0, end_s=1.4, input_tokens=100, output_tokens=4, ok=True,
                      token_times_s=[1.0, 1.1, 1.2, 1.4]),
        RequestRecord(id=1, send_s=0.5, first_token_s=2.0, end_s=3.0, input_tokens=200, output_tokens=3, ok=True,
                      token_times_s=[2.0, 2.5, 3.0]),
        RequestRecord(id=2, send_s=1.0, first_token_s=None, end_s=2.0, input_tokens=50, output_tokens=0, ok=False,
                      error="HTTP 500")]

# The keys vLLM 0.x's `bench serve --save-result` writes for a generative run (serve.py: result_json
# metadata, benchmark()'s result, process_one_metric for ttft/tpot/itl/e2el).
VLLM_KEYS = {"date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
             "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens",
             "total_output_tokens", "request_throughput", "request_goodput", "output_throughput",
             "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times",
             "errors", "generated_texts", "max_output_tokens_per_s", "max_concurrent_requests",
             *(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "std", "p99"))}


def test_fields_and_values_follow_vllms_definitions():
    r = vllm_json.result(RECS, model_id="smol", request_rate=2.0, ttft_slo_s=1.2, date="20260101-000000")
    assert VLLM_KEYS <= set(r)
    assert r["duration"] == pytest.approx(3.0) and (r["completed"], r["failed"]) == (2, 1)
    assert (r["total_input_tokens"], r["total_output_tokens"]) == (300, 7)
    assert r["request_throughput"] == pytest.approx(2 / 3) and r["output_throughput"] == pytest.approx(7 / 3)
    assert r["request_goodput"] == pytest.approx(1 / 3)  # only the first met TTFT <= 1.2 s
    assert r["mean_ttft_ms"] == pytest.approx(1250.0)  # (1.0 + 1.5) / 2
    # TPOT excludes the first token: (1.4 - 1.0) / 3 and (2.5 - 1.5) / 2
    assert r["median_tpot_ms"] == pytest.approx((400 / 3 + 500) / 2)
    assert r["itls"][0] == pytest.approx([0.1, 0.1, 0.2]) and r["itls"][2] == []
    assert r["mean_itl_ms"] == pytest.approx(1000 * (0.1 + 0.1 + 0.2 + 0.5 + 0.5) / 5)
    assert r["mean_e2el_ms"] == pytest.approx(1000 * (1.4 + 2.5) / 2)
    assert r["errors"] == ["", "", "HTTP 500"] and r["request_rate"] == 2.0 and r["max_concurrency"] is None
    assert r["max_concurrent_requests"] == 3 and r["max_output_tokens_per_s"] == 4.0  # second 1: 1.0,1.1,1.2,1.4
    assert vllm_json.result(RECS, model_id="m", max_concurrency=4)["request_rate"] == "inf"


def test_a_sweep_is_one_object_per_line_as_vllm_append_result_writes(tmp_path):
    p = tmp_path / "out" / "vllm.json"
    for rate in (1.0, 2.0):
        vllm_json.append(p, vllm_json.result(RECS, model_id="smol", request_rate=rate))
    text = p.read_text()
    assert text.count("\n") == 1 and not text.endswith("\n")
    assert [json.loads(line)["request_rate"] for line in text.splitlines()] == [1.0, 2.0]
    assert [o["request_rate"] for o in vllm_json.read(p)] == [1.0, 2.0]


def test_agent_bench_writes_vllms_format_beside_its_own(tmp_path, capsys, monkeypatch):
    """`agent bench --json --vllm-json FILE` against the mock server (real HTTP): one vLLM result
    object per rate level plus the single-stream run, numbers matching our own JSON."""
    from agent.cli import main
    from tests.tools.toolhelpers import mock_argv
    from tools.bench.mock_server import READY
    from tools.server import launch_process
    monkeypatch.setenv("INFERLOOP_PROGRESS", "plain")
    out_file = tmp_path / "vllm.json"
    out_file.write_text('{"stale": true}')  # an earlier run's file is replaced, not appended to
    with launch_process(mock_argv("--ttft-s", "0.02", "--itl-s", "0.001"), run_dir=tmp_path / "m", model="m",
                        ready_line=READY, timeout_s=30) as s:
        with pytest.raises(SystemExit) as e:
            main(["bench", "--url", s.url, "--model", "m", "--rates", "2,4", "--num-prompts", "6",
                  "--input-len", "16", "--output-len", "8", "--warmup", "1", "--single-stream", "2",
                  "--records", str(tmp_path / "rec.jsonl"), "--json", "--vllm-json", str(out_file)])
    cap = capsys.readouterr()
    assert e.value.code == 0, cap.err
    ours = json.loads(cap.out)
    got = vllm_json.read(out_file)
    assert [o["request_rate"] for o in got] == [2.0, 4.0, "inf"] and got[-1]["max_concurrency"] == 1
    assert all(VLLM_KEYS <= set(o) and o["model_id"] == "m" and o["completed"] == o["num_prompts"] for o in got)
    for o, p in zip(got, ours["sweep"]):
        assert o["output_throughput"] == pytest.approx(p["tok_s"])
        assert o["median_ttft_ms"] == pytest.approx(p["ttft_p50_s"] * 1000)
    assert "bench: started (15 req)" in cap.err  # plain progress lines off a terminal, on stderr
