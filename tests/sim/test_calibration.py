"""Issue 2, acceptance 1: `agent estimate` reproduces the story (tok/s within 12%, rates within 10%)."""
import json

import pytest

from agent.cli import main
from sandboxes.sim.cli import run_estimate
from agent.errors import BadInput
from sandboxes.sim.calib_run import STORY_KNEE_RPS_S1

SPEC = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "5", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "6"]
FINAL = ["--tp-size", "4", "--dp-size", "2", "--kv-cache-dtype", "fp8_e4m3", "--enable-aiter-allreduce-fusion"] + SPEC


def est(tail, *, weights="mxfp4", hw="mi355x", moe_tuned=False, seed=0, rates=None):
    return run_estimate(model="glm-5.2", weights=weights, hw=hw, framework="sglang", moe_tuned=moe_tuned, tail=tail,
                        input_len=20000, output_len=1000, prefix_hit=0.6, rates=rates, concurrency=None,
                        ttft_slo=5.0, seed=seed)


def near(x, target, tol):
    return abs(x - target) <= tol * target


def test_final_config_via_cli_json(capsys):
    with pytest.raises(SystemExit) as e:
        main(["estimate", "--model", "glm-5.2", "--weights", "mxfp4", "--hw", "mi355x", "--framework", "sglang",
              "--moe-tuned", "--json", "--", *FINAL])
    assert e.value.code in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert {"sweep", "knee", "single_stream_tok_s"} <= set(out)
    assert {"rps", "concurrency", "tok_s", "total_tok_s", "ttft_p50_s", "ttft_p95_s", "tpot_p50_s",
            "success"} <= set(out["sweep"][0])
    assert len(out["sweep"]) >= 6
    # The knee's achieved rate against the one the story's measurement carries: 2626 tok/s of
    # 1000-token answers, all successful, is 2.626 req/s. The story's "2.4 RPS" is the rate its
    # client offered (its sweep: 1.5 RPS -> 1913 tok/s), see STORY_KNEE_RPS_S1.
    # It is one story figure (tok/s = 1000 x rps), held to the story's 12% like the others.
    assert near(out["knee"]["rps"], STORY_KNEE_RPS_S1, 0.12), out["knee"]
    assert out["knee"]["tok_s"] == pytest.approx(1000 * out["knee"]["rps"], rel=1e-6)
    assert near(out["knee"]["tok_s"], 2626, 0.12), out["knee"]
    assert near(out["single_stream_tok_s"], 213, 0.12), out["single_stream_tok_s"]


def test_untuned_moe_falls_back_and_costs_throughput():
    out = est(FINAL)
    assert near(out["knee"]["rps"], 2.0, 0.10) and near(out["knee"]["tok_s"], 1944, 0.12), out["knee"]
    assert any("using 2stage default" in n for n in out["notes"])


def test_decode_tuned_tp8():
    tail = ["--tp-size", "8", "--kv-cache-dtype", "fp8_e4m3", "--enable-aiter-allreduce-fusion"] + SPEC
    out = est(tail)
    assert near(out["knee"]["tok_s"], 1461, 0.12), out["knee"]


def test_single_stream_without_mtp_is_about_a_third():
    out = est(FINAL[:7], moe_tuned=True, rates=[0.5])
    assert near(out["single_stream_tok_s"], 213 / 3, 0.20), out["single_stream_tok_s"]


def test_b200_fp8_story_number_at_the_parallelism_that_fits():
    # FP8 GLM-5.2 is ~766 GB: a TP4 replica needs ~191 GB per GPU and a B200 has 180 GB, so the
    # issue's TP4 x DP2 command cannot start (the sim says so, as the real node would) ...
    with pytest.raises(BadInput, match="out of memory"):
        est(FINAL[:6] + SPEC, weights="fp8", hw="b200", moe_tuned=True)
    # ... and TP8 with the same KV dtype and MTP flags reproduces the story's B200 measurement.
    out = est(["--tp-size", "8", "--kv-cache-dtype", "fp8_e4m3"] + SPEC, weights="fp8", hw="b200", moe_tuned=True)
    assert near(out["knee"]["rps"], 3.0, 0.10) and near(out["knee"]["tok_s"], 3192, 0.12), out["knee"]


def test_sweep_shape_matches_the_story_at_low_load():
    out = run_estimate(model="glm-5.2", weights="mxfp4", hw="mi355x", framework="sglang", moe_tuned=True,
                       tail=FINAL, input_len=20000, output_len=1000, prefix_hit=0.6, rates=[0.5, 1.0, 1.5, 2.0],
                       concurrency=None, ttft_slo=5.0)
    pts = out["sweep"]
    # achieved rps counts the whole span (arrivals + the last requests' ~30 s), so it trails the offer
    assert all(a["rps"] < b["rps"] for a, b in zip(pts, pts[1:]))
    assert all(p["tok_s"] == pytest.approx(1000 * p["rps"], rel=1e-6) for p in pts)
    assert all(0.3 < p["ttft_p50_s"] < 0.9 for p in pts)  # story: 0.59-0.62 s
    assert all(p["success"] == 1.0 for p in pts)
