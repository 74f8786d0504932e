"""The plots' data (agent/plot_data.py) and the roofline shares (tools/roofline.py), apart from
matplotlib: what each curve holds, by hand-computed numbers."""
import pytest

import agent.plot_data as plot_data
from tools.hardware import HardwareProfile
from tools.models import ModelCard
from tools.roofline import decode_bytes_per_step, experts_touched, prefill_flops, share


def pt(rps, tok_s, tpot, ttft50=0.5, ttft95=0.8, offered=None, success=1.0, conc=4.0):
    return {"rps": rps, "tok_s": tok_s, "tpot_p50_s": tpot, "ttft_p50_s": ttft50, "ttft_p95_s": ttft95,
            "offered_rps": offered, "success": success, "concurrency": conc}


def test_frontier_is_per_gpu_against_one_over_tpot_and_drops_dominated_points():
    sweep = [pt(1, 800, 0.01), pt(2, 1600, 0.02), pt(3, 1200, 0.04),  # the last is dominated by the second
             pt(4, 2400, 0.05), pt(5, 0, None)]
    c = plot_data.frontier(sweep, gpus=8)
    assert c.x == [20.0, 50.0, 100.0]  # output tok/s per user, ascending
    assert c.y == [300.0, 200.0, 100.0]  # output tok/s per GPU


def test_ttft_runs_along_the_offered_rate_and_marks_the_knee():
    # Overloaded: offered 4 but achieved 2.5, less than the offered-3 level's 2.9.
    sweep = [pt(2.9, 1, 0.01, 0.6, 2.0, offered=3.0), pt(1.0, 1, 0.01, 0.5, 0.9, offered=1.0),
             pt(2.5, 1, 0.01, 9.0, 20.0, offered=4.0), pt(2.0, 1, 0.01, 0.55, 1.5, offered=2.0)]
    d = plot_data.ttft(sweep, slo_s=5.0)
    assert d.rate == [1.0, 2.0, 3.0, 4.0]
    assert d.p95 == [0.9, 1.5, 2.0, 20.0]
    assert (d.knee_rate, d.knee_p95) == (3.0, 2.0)
    assert plot_data.ttft(sweep, slo_s=0.1).knee_rate is None


def test_trials_carry_the_running_best_and_one_band_per_phase_run():
    rows = [{"phase": "framework", "verdict": "kept", "objective": 10.0, "ground_s": 1800},
            {"phase": "framework", "verdict": "reverted", "objective": 12.0, "ground_s": 1800},
            {"phase": "flags", "verdict": "failed", "objective": None, "ground_s": 3600},
            {"phase": "flags", "verdict": "kept", "objective": 15.0, "ground_s": 3600}]
    d = plot_data.trials(rows)
    assert d.t == [0.5, 1.0, 2.0, 3.0] and d.unit == "h"
    assert d.best == [10.0, 10.0, 10.0, 15.0]  # a reverted trial never raises the best, however fast
    assert [(b.phase, b.start, b.end) for b in d.bands] == [("framework", 0.0, 1.0), ("flags", 1.0, 3.0)]
    untimed = plot_data.trials([{**r, "ground_s": None} for r in rows])
    assert untimed.unit == "trial" and untimed.t == [1.0, 2.0, 3.0, 4.0]


CARD = ModelCard(name="toy", architecture="LlamaForCausalLM", hidden_size=1000, num_hidden_layers=2,
                 num_attention_heads=10, num_key_value_heads=10, intermediate_size=3000, vocab_size=1000)
HW = HardwareProfile(name="toy", vendor="nvidia", device_name="toy", hbm_gb=80, hbm_tb_s=0.1,
                     tflops={"bf16": 1.0}, scaleup_gb_s=1, tdp_w=1, usd_per_gpu_h=1, usd_per_gpu_h_neocloud=1)


def test_experts_touched_runs_from_topk_to_all_experts():
    assert experts_touched(256, 8, 1) == pytest.approx(8)
    assert experts_touched(256, 8, 4096) == pytest.approx(256)
    assert experts_touched(0, 0, 10) == 0


def test_roofline_shares_by_hand():
    # weights 2 x (4e6 attention + 9e6 MLP) x 2 B + lm_head 2e6 B; KV 8000 B/token x 4 seqs x 1000 tokens
    assert decode_bytes_per_step(CARD, "bf16", "auto", batch=4, context=1000) == pytest.approx(86e6)
    # 2 x 28e6 active params x 1000 tokens + attention 4 x 2 layers x 1000 x 500 x 1000
    assert prefill_flops(CARD, 1000) == pytest.approx(6.0e10)
    cand = {"weights": "bf16", "parallel": {"tp": 1, "dp": 1}, "flags": {}}
    sweep = [pt(1.0, 1, 0.01, ttft50=0.5, offered=1.0, conc=4.0), pt(0.5, 1, 0.005, ttft50=0.25, offered=0.5, conc=1)]
    r = share(CARD, HW, cand, sweep, {"input_len": 1000, "output_len": 0, "prefix_hit": 0.0}, knee_rps=1.0)
    assert r.decode.share == pytest.approx(86e6 / 0.01 / 1e11)  # at the knee's point
    assert r.prefill.share == pytest.approx(6.0e10 / 0.25 / 1e12)  # at the lightest offered load
    fp8kv = share(CARD, HW, {**cand, "flags": {"--kv-cache-dtype": "fp8"}}, sweep,
                  {"input_len": 1000, "output_len": 0}, knee_rps=1.0)
    assert fp8kv.decode.share == pytest.approx((86e6 - 16e6) / 0.01 / 1e11)  # fp8 KV halves its bytes
    assert share(CARD, HW, cand, [], {"input_len": 1}).decode is None
