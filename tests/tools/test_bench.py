"""Prompts with exact token counts, the streaming client against the mock server over real HTTP,
the sweep over a fake Client, and `agent bench` end to end (including bad input -> exit 2)."""
import asyncio
import json

import pytest

from agent.cli import main
from agent.errors import BadInput
from tools.bench.client import OpenAIClient
from tools.bench.metrics import summarize
from tools.bench.prompts import PromptMaker, load_tokenizer
from tools.bench.records import RequestSpec
from tools.bench.sweep import sweep
from tools.bench.workload import Workload, schedule
from tools.protocols import Client
from tools.server import launch_process
from tests.fake_clients import CapacityClient
from toolhelpers import mock_argv
from toolhelpers_tok import make_tokenizer_dir

READY = "Application startup complete."


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    return make_tokenizer_dir(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def mock(tmp_path_factory):
    with launch_process(mock_argv("--ttft-s", "0.03", "--itl-s", "0.002"), run_dir=tmp_path_factory.mktemp("m"),
                        model="m", ready_line=READY, timeout_s=30) as s:
        yield s


@pytest.mark.parametrize("n_in,hit,groups", [(64, 0.5, 1), (37, 0.0, 1), (200, 0.9, 3), (1, 0.0, 1)])
def test_prompts_have_exact_counts_and_shared_prefixes(tok_dir, n_in, hit, groups):
    pm = PromptMaker(load_tokenizer(tok_dir))
    specs = pm.prompts(schedule(Workload(input_len=n_in, output_len=4, prefix_hit=hit, prefix_groups=groups),
                                n=6, rate=None), seed=3)
    ids = [pm.tok.encode(s.prompt).ids for s in specs]
    assert [len(i) for i in ids] == [n_in] * 6
    pre = int(round(n_in * hit))
    for a in range(6):
        for b in range(a + 1, 6):
            same_group = a % groups == b % groups
            assert (ids[a][:pre] == ids[b][:pre]) == (same_group or pre == 0)
            assert ids[a] != ids[b] or n_in == 1
    again = pm.prompts(schedule(Workload(input_len=n_in, output_len=4, prefix_hit=hit, prefix_groups=groups),
                                n=6, rate=None), seed=4)
    assert again[0].prompt[:1] and (pre == 0 or pm.tok.encode(again[0].prompt).ids[:pre] == ids[0][:pre])


def test_missing_and_malformed_tokenizer_are_bad_input(tmp_path):
    with pytest.raises(BadInput, match="no tokenizer at"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(BadInput, match="cannot read tokenizer"):
        load_tokenizer(tmp_path)


@pytest.mark.parametrize("lean", [True, False])  # the lean SSE reader and the httpx path
def test_client_streams_and_times_every_token(mock, lean):
    c = OpenAIClient(mock.url, "m", lean=lean)
    assert isinstance(c, Client) and c.check() == ["m"]
    specs = [RequestSpec(id=i, input_tokens=3, output_tokens=10, prompt="a b c") for i in range(6)]
    recs = asyncio.run(c.run(specs, concurrency=3))
    assert [r.id for r in recs] == list(range(6))
    for r in recs:
        assert r.ok and r.output_tokens == 10 and len(r.token_times_s) == 10
        assert r.ttft_s >= 0.03  # the mock waits 30 ms before the first token
        assert r.token_times_s == sorted(r.token_times_s) and r.end_s >= r.token_times_s[-1]
        # the mock sleeps 30 ms, then 2 ms between tokens: no request can take less. (Not the
        # gaps one by one: on a busy machine two tokens can arrive in one read, so a single gap,
        # and even their median, can read below 2 ms.)
        assert r.latency_s >= 0.03 + 9 * 0.002
    p = summarize(recs, fixed_concurrency=3)
    assert p.success == 1.0 and p.tok_s > 0 and p.itl_p50_s > 0


def test_client_follows_the_arrival_schedule(mock):
    specs = [RequestSpec(id=i, input_tokens=1, output_tokens=2, arrival_s=0.2 * i, prompt="x") for i in range(4)]
    recs = asyncio.run(OpenAIClient(mock.url, "m").run(specs))
    for r, s in zip(recs, specs):
        assert s.arrival_s <= r.send_s < s.arrival_s + 0.1


def test_client_records_errors_never_raises(mock):
    specs = [RequestSpec(id=0, input_tokens=1, output_tokens=2, prompt="x")]
    for lean in (True, False):
        (r,) = asyncio.run(OpenAIClient(mock.url, "other", lean=lean).run(specs))
        assert not r.ok and "HTTP 404" in r.error and "does not exist" in r.error
    (r,) = asyncio.run(OpenAIClient("http://127.0.0.1:1", "m").run(specs))
    assert not r.ok and "Connect" in r.error
    with pytest.raises(BadInput, match="not served"):
        OpenAIClient(mock.url, "other").check()


def test_complete_returns_texts_in_order(mock):
    c = OpenAIClient(mock.url, "m")
    assert asyncio.run(c.complete(["p1", "p2", "p3"], max_tokens=2)) == ["tok tok "] * 3 and c.errors == {}
    c = OpenAIClient(mock.url, "zz")
    assert asyncio.run(c.complete(["p1"], max_tokens=2)) == [""] and "404" in c.errors[0]




def test_sweep_finds_the_knee_and_stops_after_the_break():
    w = Workload(input_len=10, output_len=10, prefix_hit=0.0)
    c = CapacityClient(cap=20.0)
    res = asyncio.run(sweep(c, w, ttft_slo_s=0.5, rates=[40, 1, 2, 80], n=200, single_stream_n=2))
    assert [p.offered_rps for p in res.sweep] == [1, 2, 40, 80]
    assert res.sweep[0].ttft_p95_s < 0.5 < res.sweep[2].ttft_p95_s
    assert res.knee is not None and res.knee.rps == res.sweep[1].rps
    assert res.single_stream_tok_s > 0 and c.calls[-1] == (2, 1)
    c2 = CapacityClient(cap=20.0)
    res2 = asyncio.run(sweep(c2, w, ttft_slo_s=0.5, rates=[1, 2, 40, 80], n=lambda r: int(r * 5),
                             stop_after_break=True, repeats=3))
    assert [p.offered_rps for p in res2.sweep] == [1, 2, 40]
    assert [n for n, _ in c2.calls] == [5] * 3 + [10] * 3 + [200] * 3
    assert res2.noise["repeats"] == 3 and len(res2.noise["tok_s"]) == 3


def test_sweep_with_auto_rates_searches_for_the_knee():
    w = Workload(input_len=10, output_len=10, prefix_hit=0.0)
    res = asyncio.run(sweep(CapacityClient(cap=20.0), w, ttft_slo_s=0.5, rates="auto", n=lambda r: int(r * 10) + 5))
    rates = [p.offered_rps for p in res.sweep]
    assert rates[:3] == [0.5, 1.0, 2.0] and rates == sorted(rates) and len(rates) > 5  # doubled, then bisected
    assert res.knee is not None and res.knee.rps == max(p.rps for p in res.sweep if p.ttft_p95_s <= 0.5)
    assert any(p.ttft_p95_s > 0.5 for p in res.sweep)  # it went past the knee to find it
    with pytest.raises(ValueError, match="no repeats"):
        asyncio.run(sweep(CapacityClient(1.0), w, ttft_slo_s=1.0, rates="auto", repeats=2))


def test_sweep_over_concurrency_and_bad_arguments():
    res = asyncio.run(sweep(CapacityClient(100.0), Workload(input_len=5, output_len=5), ttft_slo_s=1.0,
                            concurrencies=[4, 1], n=8))
    assert [p.concurrency for p in res.sweep] == [1.0, 4.0]
    with pytest.raises(ValueError):
        asyncio.run(sweep(CapacityClient(1.0), Workload(), ttft_slo_s=1.0))


def _cli(capsys, *args):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_agent_bench_json(mock, tok_dir, tmp_path, capsys):
    rec = tmp_path / "r.jsonl"
    code, out, err = _cli(capsys, "bench", "--url", mock.url, "--model", "m", "--tokenizer", str(tok_dir),
                          "--input-len", "50", "--output-len", "5", "--prefix-hit", "0.5", "--rates", "5,20",
                          "--num-prompts", "10", "--ttft-slo", "1", "--records", str(rec), "--json")
    assert code == 0, err
    res = json.loads(out)
    assert [p["offered_rps"] for p in res["sweep"]] == [5, 20] and res["knee"] is not None
    assert all(p["success"] == 1.0 and p["n"] == 10 for p in res["sweep"])
    assert res["workload"]["exact_prompts"] is True and res["single_stream_tok_s"] > 0
    rows = [json.loads(l) for l in rec.read_text().splitlines()]
    assert len(rows) == 22 and rows[0]["rate"] == 5 and rows[0]["input_tokens"] == 50


@pytest.mark.parametrize("args,message", [
    (["--url", "http://127.0.0.1:1", "--model", "m", "--rates", "1"], "cannot reach http://127.0.0.1:1"),
    (["--model", "nope", "--rates", "1"], "model 'nope' is not served"),
    (["--model", "m", "--rates", "1", "--tokenizer", "/no/such/dir"], "no tokenizer at /no/such/dir"),
    (["--model", "m", "--rates", "1,zero"], "--rates must be comma-separated numbers"),
    (["--model", "m"], "give exactly one of --rates or --concurrency"),
    (["--model", "m", "--rates", "auto", "--repeats", "3"], "--rates auto measures each rate once"),
])
def test_agent_bench_bad_input_is_one_line_exit_2(mock, capsys, args, message):
    if "--url" not in args:
        args = ["--url", mock.url] + args
    code, out, err = _cli(capsys, "bench", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_agent_bench_auto_rates_finds_a_knee(mock, capsys, tmp_path):
    code, out, err = _cli(capsys, "bench", "--url", mock.url, "--model", "m", "--input-len", "8", "--output-len", "2",
                          "--rates", "auto", "--num-prompts", "6", "--ttft-slo", "1", "--records",
                          str(tmp_path / "r.jsonl"), "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["sweep"][0]["offered_rps"] == 0.5 and len(res["sweep"]) >= 2 and res["knee"] is not None
    rows = [json.loads(l) for l in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert {r["rate"] for r in rows if "rate" in r} == {p["offered_rps"] for p in res["sweep"]}


def test_agent_bench_duration_sets_requests_per_rate(mock, capsys):
    code, out, err = _cli(capsys, "bench", "--url", mock.url, "--model", "m", "--input-len", "8", "--output-len", "2",
                          "--rates", "4,10", "--duration", "1.5", "--warmup", "0", "--single-stream", "0",
                          "--records", "/dev/null", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert [p["n"] for p in res["sweep"]] == [6, 15] and res["single_stream_tok_s"] is None
    assert res["workload"]["exact_prompts"] is False


def test_client_fills_missing_prompts_distinct_per_run_with_shared_prefixes(tok_dir):
    specs = schedule(Workload(input_len=40, output_len=2, prefix_hit=0.5, prefix_groups=2), n=4, rate=None)
    c = OpenAIClient("http://127.0.0.1:1", "m")  # no tokenizer: word prompts of the right length
    a, b = c.fill(specs), c.fill(specs)
    assert all(len(s.prompt.split()) == 40 for s in a)
    assert len({s.prompt for s in a + b}) == 8  # never one repeated text, not even across runs
    assert a[0].prompt.split()[:20] == b[2].prompt.split()[:20] != a[1].prompt.split()[:20]
    exact = OpenAIClient("http://127.0.0.1:1", "m", prompts=PromptMaker(load_tokenizer(tok_dir)))
    assert [len(exact.prompts.tok.encode(s.prompt).ids) for s in exact.fill(specs)] == [40] * 4
    given = [RequestSpec(id=0, input_tokens=3, output_tokens=1, prompt="keep me")]
    assert c.fill(given)[0].prompt == "keep me"
