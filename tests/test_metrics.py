from tools.bench.metrics import knee, summarize
from tools.bench.records import RequestRecord
from tools.bench.workload import Workload, schedule


def rec(i, send, first, end, out=10, ok=True):
    return RequestRecord(id=i, send_s=send, first_token_s=first, end_s=end, input_tokens=100,
                         output_tokens=out, ok=ok)


def test_summarize_counts_rates_and_latencies():
    rs = [rec(0, 0.0, 0.5, 2.0), rec(1, 1.0, 1.2, 4.0)]
    p = summarize(rs)
    assert p.duration_s == 4.0
    assert p.rps == 0.5 and p.tok_s == 5.0 and p.total_tok_s == 55.0
    assert p.ttft_p50_s == (0.5 + 0.2) / 2
    assert p.success == 1.0
    assert abs(p.concurrency - (2.0 + 3.0) / 4.0) < 1e-12  # Little's law


def test_failed_requests_lower_success_and_are_not_in_latency():
    rs = [rec(0, 0.0, 0.5, 2.0), rec(1, 0.0, None, 1.0, out=0, ok=False)]
    p = summarize(rs)
    assert p.success == 0.5 and p.rps == 0.5 and p.ttft_p95_s == 0.5


def test_knee_is_highest_rate_meeting_slo():
    pts = [summarize([rec(0, 0, t, 2.0)]) for t in (0.5, 1.0, 9.0)]
    for p, r in zip(pts, (1.0, 2.0, 3.0)):
        p.rps = r
    k = knee(pts, ttft_slo_s=5.0)
    assert k.rps == 2.0
    assert knee(pts, ttft_slo_s=0.1) is None


def test_schedule_is_poisson_and_reproducible():
    w = Workload(input_len=1000, output_len=10, prefix_hit=0.5)
    a = schedule(w, n=2000, rate=4.0, seed=1)
    assert [s.arrival_s for s in a] == [s.arrival_s for s in schedule(w, n=2000, rate=4.0, seed=1)]
    assert a[0].arrival_s == 0.0 and a[0].prefix_tokens == 500
    assert abs(2000 / a[-1].arrival_s - 4.0) < 0.3
