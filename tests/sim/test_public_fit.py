"""Issue 15: the shipped efficiency table is the calibration's output, and the mechanisms the
public benchmarks show are in the model (length spread, prompt kind, batch occupancy, versions)."""
import json
import math

import numpy as np
import pytest

from sandboxes.sim import table
from sandboxes.sim.calib_fit import summarize
from sandboxes.sim.calibrate import engine_eval, error_rows, load_cases, targets
from sandboxes.sim.engine import Engine
from sandboxes.sim.perf import SimConfig, acceptance_length, acceptance_spread, efficiency, step_time
from sandboxes.sim.points import OutOfScope, to_case
from sandboxes.sim.uncertainty import uncertainty
from tools.bench.metrics import summarize as bench_summary
from tools.bench.workload import Workload, schedule
from tools.hardware import get_hardware
from tools.models import get_model

M, HW = get_model("glm-5.2"), get_hardware("mi355x")


@pytest.fixture(scope="module")
def shipped(shared_dir):
    cs, skipped = load_cases(shared_dir / "data" / "public-benchmarks" / "points.json")
    tbl = table.reload()
    return cs, skipped, tbl, error_rows(cs, engine_eval(cs, tbl))


def test_shipped_table_reproduces_its_recorded_error_summary(shipped):
    # The table is what `python -m sandboxes.sim.calibrate` wrote: re-running the simulator on
    # the same points with it gives the summary recorded beside it (a hand edit would not).
    cs, _, tbl, rows = shipped
    got, want = summarize(rows), tbl["summary"]
    assert got["points"] == want["points"] == len(cs)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=2e-3), k


def test_shipped_fit_meets_the_throughput_tpot_ttft_and_story_targets(shipped):
    _, _, _, rows = shipped
    met = dict(targets(summarize(rows), refusals=0))
    assert met["throughput median error <= 15%"]
    assert met[">= 80% of throughput within 30%"]
    assert met["TPOT median error <= 15%"]
    assert met["TTFT median error <= 30%"]
    assert met["story figures within 12%"]


def test_cross_validation_is_recorded_and_worse_than_the_fit(shipped):
    _, _, tbl, _ = shipped
    cv = tbl["cv"]["leave_one_source_out"]
    assert cv["points"] == tbl["summary"]["points"]
    assert cv["tput_median"] >= tbl["summary"]["tput_median"]  # held-out error cannot beat in-sample


def _point(**kw):
    p = {"id": "X1", "source": {"repo": "r", "path": "p"}, "model": "zai-org/GLM-5-FP8", "weights_precision": "FP8",
         "hardware": "MI355X", "gpu_count": 4, "framework": "sglang v0.5.12", "parallelism": "--tp-size 4",
         "spec_decoding": None, "isl": 1024, "osl": 1024, "random_range_ratio": 0.8, "concurrency": 16,
         "num_prompts": 160, "output_tok_s": 500.0, "output_tok_s_scope": "per server", "ttft_median_ms": None,
         "tpot_median_ms": 20.0, "ttft_mean_ms": None, "tpot_mean_ms": None,
         "launch": "python3 -m sglang.launch_server --model-path M --tp-size 4 --attention-backend dsa "
                   "--reasoning-parser glm45 --no-such-flag 3 --port 8000", "notes": "", "inferred": []}
    p.update(kw)
    return p


def test_a_flag_the_cli_rejects_is_a_listed_refusal_not_a_lost_point():
    # A build without a release number is parsed by the newest shipped CLI, which has the DSA
    # backend; a flag no release has is dropped, listed, and the configuration still simulated.
    c = to_case(_point(framework="sglang (PR #32175 build)"))
    assert c.release is None
    assert c.tail == ["--tp-size", "4", "--attention-backend", "dsa", "--reasoning-parser", "glm45"]
    assert c.refused == ["--no-such-flag (unrecognized)"]
    # The release a point names parses its launch: sglang 0.5.12 had no `dsa` choice yet (nsa).
    old = to_case(_point())
    assert old.release == "0.5.12" and old.refused[0] == "--attention-backend ('dsa' not accepted)"
    assert (c.framework, c.version, c.measured) == ("sglang", None, {"output_tok_s": 500.0, "tpot_s": 0.02})
    assert to_case(_point(framework="sglang v0.5.8.post1 (rocm/sgl-dev)")).version == "0.5.8"
    with pytest.raises(OutOfScope, match="disaggregated"):
        to_case(_point(framework="sglang PD + large EP"))
    with pytest.raises(OutOfScope, match="GPU count"):
        to_case(_point(gpu_count=None))


def test_range_ratio_spreads_lengths_without_moving_arrivals():
    w = Workload(input_len=1000, output_len=500, prefix_hit=0.0)
    fixed = schedule(w, n=400, rate=2.0, seed=3)
    spread = schedule(w.model_copy(update={"range_ratio": 0.8}), n=400, rate=2.0, seed=3)
    assert {s.input_tokens for s in fixed} == {1000}
    ins = np.array([s.input_tokens for s in spread])
    assert ins.min() >= 800 and ins.max() <= 1000 and 880 < ins.mean() < 920
    assert [s.arrival_s for s in fixed] == [s.arrival_s for s in spread]


def _engine(**kw):
    cfg = SimConfig(**{**dict(framework="sglang", weights="fp8", tp=4, kv_dtype="fp8_e4m3", moe_tuned=True), **kw})
    return Engine(M, HW, cfg, efficiency("sglang", "amd"), rng=np.random.default_rng(0), noise=0.0)


def test_equal_lengths_arrive_in_waves_and_queue_behind_each_others_prefill():
    # ratio 1.0: all requests of a wave finish together, the next wave's prompts queue for prefill.
    w = Workload(input_len=8192, output_len=1024, prefix_hit=0.0)
    same = bench_summary(_engine().run(schedule(w, n=160, rate=None), concurrency=32))
    spread = bench_summary(_engine().run(schedule(w.model_copy(update={"range_ratio": 0.8}), n=160, rate=None),
                                         concurrency=32))
    assert same.ttft_p50_s > 2 * spread.ttft_p50_s


def test_speculative_acceptance_spreads_equal_lengths_out_of_their_waves():
    # A draft chain emits 1..depth+1 tokens a step (stopping at its first rejection), so requests
    # of one length finish at different steps and the next ones arrive staggered, not in a wave.
    mtp = dict(spec="mtp", spec_steps=3, spec_draft_tokens=3)
    sd, most = acceptance_spread(SimConfig(framework="sglang", **mtp))
    assert sd > 0.5 and most == 4 and acceptance_spread(SimConfig(framework="sglang")) == (0.0, 1)
    w = Workload(input_len=8192, output_len=1024, prefix_hit=0.0)
    waves = bench_summary(_engine().run(schedule(w, n=160, rate=None), concurrency=32))
    spec = bench_summary(_engine(**mtp).run(schedule(w, n=160, rate=None), concurrency=32))
    assert spec.ttft_p50_s < 0.5 * waves.ttft_p50_s
    e = _engine(**mtp)
    e.run(schedule(w, n=1, rate=None), concurrency=1)  # sets the run's acceptance
    draws = [e._emitted(40) / 40 for _ in range(400)]
    assert np.mean(draws) == pytest.approx(e.accept, rel=0.02)  # the spread leaves the mean alone


def test_a_point_without_a_published_command_keeps_the_kv_dtype_and_drafts_it_states():
    c = to_case(_point(launch="(script not retrieved)", kv_cache_dtype="fp8_e4m3"))
    assert c.tail[-2:] == ["--kv-cache-dtype", "fp8_e4m3"] and not c.refused
    a = to_case(_point(launch="", framework="ATOM", kv_cache_dtype="fp8",
                       spec_decoding="--method mtp --num-speculative-tokens 3"))
    assert ["--method", "mtp", "--num-speculative-tokens", "3", "--kv_cache_dtype", "fp8"] == a.tail[-6:]
    assert not a.refused


def test_drafts_accept_less_on_random_token_prompts():
    mtp = SimConfig(framework="sglang", spec="mtp", spec_steps=3, spec_draft_tokens=3)
    assert 1.0 < acceptance_length(mtp, random_tokens=True) < acceptance_length(mtp)
    w = Workload(input_len=1024, output_len=1024, prefix_hit=0.0)
    txt = bench_summary(_engine(spec="mtp", spec_steps=3, spec_draft_tokens=3).run(schedule(w, n=32, rate=None),
                                                                                   concurrency=8))
    rnd = bench_summary(_engine(spec="mtp", spec_steps=3, spec_draft_tokens=3).run(
        schedule(w.model_copy(update={"random_tokens": True}), n=32, rate=None), concurrency=8))
    assert rnd.tok_s < 0.9 * txt.tok_s


def test_few_experts_per_step_stream_below_the_saturated_rate():
    # Per touched expert, the MoE part costs more at batch 1 (8 experts) than at batch 64 (~222).
    c = SimConfig(framework="sglang", weights="fp8", tp=4, moe_tuned=True)
    eff = efficiency("sglang", "amd")
    from sandboxes.sim.perf import experts_touched
    per = [step_time(M, HW, c, eff, n_decode=n, decode_ctx=2000).parts["moe"] / experts_touched(256, 8, n)
           for n in (1, 64)]
    assert per[0] > 1.5 * per[1]


def test_an_older_release_has_its_own_slower_row():
    old, new = efficiency("sglang", "amd", "0.5.8"), efficiency("sglang", "amd")
    assert old.bw < new.bw and old.gemm < new.gemm and old.layer_us == new.layer_us
    assert efficiency("sglang", "amd", "9.9") == new  # an unknown release is the current one


def test_hybrid_models_keep_kv_only_in_their_full_attention_layers():
    q = get_model("qwen3.5-397b-a17b")
    assert q.kv_bytes_per_token("bf16") == 15 * 2 * 2 * 256 * 2


def test_uncertainty_names_its_group_and_says_when_it_is_far():
    tbl = {"groups": {"sglang/mi355x": {"n": 30, "output_tok_s": {"n": 30, "bias": 0.0, "sd": 0.15}},
                      "all": {"n": 40, "output_tok_s": {"n": 40, "bias": 0.0, "sd": 0.2}},
                      "vllm/b200": {"n": 1, "output_tok_s": {"n": 1, "bias": 0.01, "sd": 0.01}}}}
    u = uncertainty("sglang", "mi355x", tbl)
    assert (u["group"], u["n"], u["tok_s_factor"]) == ("sglang/mi355x", 30, pytest.approx(np.exp(0.15), abs=1e-3))
    assert uncertainty("sglang", "mi300x", tbl)["tok_s_sd"] == pytest.approx(0.15 * 1.5)  # extrapolated, widened
    assert uncertainty("vllm", "b200", tbl)["tok_s_sd"] == pytest.approx(0.2)  # one point: pooled spread
    far = uncertainty("atom", "b300", tbl)
    assert far["group"] is None and "far from any calibrated group" in far["message"]


def test_the_band_is_the_larger_of_the_groups_spread_in_the_fit_and_held_out_of_it():
    # A user's configuration is one the fit never saw: where the group's points predicted from a fit
    # without their source (or model) spread wider than in the fit, that wider spread is the band.
    tbl = {"groups": {"sglang/b200": {"n": 11, "output_tok_s": {"n": 11, "bias": 0.0, "sd": 0.12},
                                      "tpot_s": {"n": 11, "bias": 0.0, "sd": 0.17}},
                      "all": {"n": 40, "output_tok_s": {"n": 40, "bias": 0.0, "sd": 0.2}}},
           "groups_held_out": {"sglang/b200": {"n": 22, "output_tok_s": {"n": 22, "bias": 0.1, "sd": 0.3},
                                               "tpot_s": {"n": 22, "bias": 0.0, "sd": 0.1}}}}
    u = uncertainty("sglang", "b200", tbl)
    assert (u["tok_s_sd"], u["tok_s_sd_fit"], u["tok_s_sd_held_out"]) == (0.3, 0.12, 0.3)
    assert u["tpot_sd"] == 0.17  # held out it did better: the fit's spread stands
    assert u["message"].startswith("+-35% tok/s") and "held out of the fit; +-13% in it" in u["message"]
    assert uncertainty("sglang", "b200", {"groups": tbl["groups"]})["tok_s_sd"] == 0.12  # none recorded


def test_the_shipped_table_records_held_out_bands_for_its_groups(shipped):
    # calibrate (or calibrate --cv-only) writes them from both hold-out schemes: each point twice
    _, _, tbl, _ = shipped
    held, fit = tbl["groups_held_out"], tbl["groups"]
    assert set(held) == set(fit)
    assert all(held[g]["n"] == 2 * fit[g]["n"] for g in fit)
    assert held["all"]["output_tok_s"]["sd"] > fit["all"]["output_tok_s"]["sd"]  # held out is worse overall
    shipped_band = uncertainty("sglang", "b200")
    assert shipped_band["tok_s_sd"] == pytest.approx(max(fit["sglang/b200"]["output_tok_s"]["sd"],
                                                         held["sglang/b200"]["output_tok_s"]["sd"]))


def test_on_a_cpu_the_band_is_the_live_testbed_fits_spread_on_the_levels_it_did_not_fit():
    judged = {"framework": "vllm", "model": "smollm2-135m", "levels": [1, 4, 16], "machine": "AMD EPYC",
              "serving_mode": "eager-bf16", "tok_s_sd": 0.2, "ttft_sd": 0.3, "tpot_sd": 0.05}
    tbl = {"groups": {"all": {"n": 40, "output_tok_s": {"n": 40, "bias": 0.0, "sd": 0.2}}}, "cpu_fit": {"judged": judged}}
    u = uncertainty("vllm", "cpu", tbl)
    assert (u["group"], u["n"], u["tok_s_sd"], u["ttft_sd"]) == ("vllm/cpu", 3, 0.2, 0.3)
    assert "live testbed" in u["message"] and "AMD EPYC" in u["message"] and "+-22% tok/s" in u["message"]
    other = uncertainty("sglang", "cpu", tbl)  # another framework on the CPU: extrapolated, wider
    assert other["tok_s_sd"] == pytest.approx(0.3) and "extrapolated from vllm" in other["basis"]
    assert uncertainty("vllm", "cpu", {"groups": {}})["group"] is None  # no fit recorded: it says so
    # a check on a machine the fit never saw widens the band to what that machine showed
    xeon = {"machine": "Intel Xeon", "serving_mode": "eager-fp32", "tok_s_sd": 0.25, "ttft_sd": 0.1, "tpot_sd": 0.2}
    w = uncertainty("vllm", "cpu", {**tbl, "cpu_fit": {"judged": judged, "checks": [xeon]}})
    assert (w["tok_s_sd"], w["ttft_sd"], w["tpot_sd"]) == (0.25, 0.3, 0.2) and "checked on Intel Xeon" in w["message"]
    # a fit to several machines: the band is the widest spread of a machine the fit left out
    amd = {"machine": "AMD EPYC", "serving_mode": "eager-bf16", "tok_s_sd": 0.37, "ttft_sd": 0.28, "tpot_sd": 0.48}
    held = [{**m, "held_out": True} for m in (amd, xeon, xeon)]
    j = uncertainty("vllm", "cpu", {**tbl, "cpu_fit": {"judged": judged, "checks": held}})
    assert j["tok_s_sd"] == 0.37 and "+-45% tok/s" in j["message"]
    assert "3 machines, each also judged by a fit to the others: AMD EPYC eager-bf16, Intel Xeon eager-fp32 x2" in j["message"]
    shipped = uncertainty("vllm", "cpu")  # the shipped table carries the recorded fit's spread
    assert shipped["group"] == "vllm/cpu" and shipped["tok_s_factor"] > 1.0


def test_a_cpu_without_a_bf16_instruction_is_far_from_the_calibrated_machines():
    from sandboxes.sim.uncertainty import _cpu
    from tools.hardware import native_bf16
    judged = {"framework": "vllm", "model": "smollm2-135m", "machine": "AMD EPYC", "serving_mode": "eager-bf16",
              "levels": [1, 4, 16], "tok_s_sd": 0.2, "ttft_sd": 0.3}
    assert _cpu("vllm", judged)["basis"] == "calibrated on the live testbed"
    u = _cpu("vllm", judged, native=False)
    assert "far from any calibrated group" in u["basis"] and "no bf16 instruction" in u["message"]
    assert u["tok_s_sd"] == 0.2  # the band is not made up: it says where it does not reach
    assert native_bf16("flags : fpu avx512f amx_bf16") and not native_bf16("flags : fpu avx2 avx512f avx512_vnni")


def test_the_shipped_cpu_row_and_band_are_the_recorded_machines_joint_fit():
    """The cpu row is fitted to several machines' recorded testbed runs at once, and each machine
    is judged by a fit to the others: refitting from the recordings gives the shipped row and the
    band agent estimate prints (a recording edited by hand, or a row tuned by hand, fails this)."""
    import argparse
    import importlib.util
    from pathlib import Path
    perf = Path(__file__).resolve().parents[1] / "perf"
    spec = importlib.util.spec_from_file_location("cpu_profile", perf / "cpu_profile.py")
    cp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cp)
    fit = table.load()["cpu_fit"]
    runs = [cp.recording(json.loads((perf / "results" / f).read_text()), f) for f in fit["recordings"]]
    assert len({r["cpu_model"] for r in runs}) >= 2  # more than one kind of machine behind the band
    a = argparse.Namespace(input_len=256, output_len=64, vllm_version="0.32.0", tolerance=0.25)
    row = cp.fit(a, runs)
    shipped = table.load()["rows"]["cpu/cpu"]
    assert {k: row[k] for k in cp.FITTED} == pytest.approx({k: shipped[k] for k in cp.FITTED}, rel=0.02)
    judged = [lv for r in runs for lv in cp.judge(a, r, shipped)[0]]
    assert cp.spread(judged) == pytest.approx({k: fit["judged"][k] for k in cp.SPREADS}, abs=0.005)
    held = {(c["machine"], c["measured_at"]): c for c in fit["checks"] if c.get("held_out")}
    for i, r in enumerate(runs):
        got = cp.spread(cp.judge(a, r, cp.fit(a, runs[:i] + runs[i + 1:]))[0])
        assert got == pytest.approx({k: held[r["cpu_model"], r["measured_at"]][k] for k in cp.SPREADS}, abs=0.01)


def test_estimate_output_gets_the_band_of_its_group():
    from sandboxes.sim.uncertainty import for_estimate
    u = for_estimate("sglang", "mi355x", {"knee": {"tok_s": 1000.0}, "single_stream_tok_s": None})
    assert u["group"] == "sglang/mi355x" and u["n"] >= 10 and u["tok_s_factor"] > 1.0
    lo, hi = u["knee_tok_s_band"]
    assert lo < 1000.0 < hi and hi / 1000.0 == pytest.approx(u["tok_s_factor"], abs=1e-3)
    assert "single_stream_tok_s_band" not in u


def test_nvfp4_checkpoints_do_not_start_on_rocm(tmp_path):
    # ModelOpt NVFP4 runs on NVIDIA Blackwell FP4 kernels; a ROCm build refuses it at load, the
    # way an unsupported quantization method is refused, and the planner moves on.
    from sandboxes.sim import SimSandbox
    from tools.candidate import Candidate, Parallel
    from tools.protocols import LaunchFailure
    c = Candidate(framework="atom", weights="nvfp4", parallel=Parallel(tp=8), flags={})
    with pytest.raises(LaunchFailure) as e:
        SimSandbox("deepseek-v3", "mi355x", seed=0).launch(c, tmp_path / "amd")
    assert e.value.diagnosis.kind == "unsupported_quant" and "modelopt_fp4" in str(e.value)
    server = SimSandbox("deepseek-v3", "b200", seed=0).launch(c.model_copy(update={"framework": "sglang"}),
                                                              tmp_path / "nv")
    server.stop()


def test_routed_experts_run_at_their_own_gemm_fraction_and_dense_models_never_see_it():
    # Prefill of a MoE model spends its routed FLOPs in grouped expert GEMMs (a few hundred of the
    # chunk's tokens per expert): halving their fraction slows the MoE part; a dense model's step
    # is the same whatever it is.
    from dataclasses import replace
    c = SimConfig(framework="sglang", weights="fp8", tp=4, moe_tuned=True)
    eff = efficiency("sglang", "amd")
    assert eff.moe_gemm is not None and eff.moe_gemm != eff.gemm
    slow = replace(eff, moe_gemm=eff.moe_gemm / 2)
    full, half = (step_time(M, HW, c, e, n_decode=0, decode_ctx=0, prefill_tokens=8192, prefill_ctx=4096,
                            n_prefill_seqs=1).parts["moe"] for e in (eff, slow))
    assert half > 1.5 * full
    llama, d = get_model("llama-3.3-70b"), SimConfig(framework="vllm", weights="fp8", tp=1)
    dense = [step_time(llama, HW, d, e, n_decode=0, decode_ctx=0, prefill_tokens=8192, prefill_ctx=4096,
                       n_prefill_seqs=1).seconds for e in (eff, slow)]
    assert dense[0] == dense[1]


def test_a_stack_with_no_points_in_the_fit_is_predicted_at_the_pool_of_the_others(shipped):
    # Partial pooling: a row is drawn toward its parameters' values across stacks, so a stack held
    # out of the fit (as in leave-one-source-out) gets the pooled values, not a fixed guess.
    from sandboxes.sim import calib_fit as F
    from sandboxes.sim.calibrate import items_for
    cs, _, tbl, _ = shipped
    items = items_for([c for c in cs if c.group == "atom/amd"])
    layout = F.Layout(["atom/amd", "vllm/nvidia"])
    start = layout.x0(tbl)
    x = F.fit(items, np.ones(len(items)), layout, tbl, start)
    v, v0 = layout.values(x), layout.values(start)
    for p in table.ROW_PARAMS:  # the fit stops within a few % of the pool (its tolerance is on the whole cost)
        assert v["vllm/nvidia"][p.name] == pytest.approx(v[F.POOL][p.name], rel=0.15), p.name
    assert sum(abs(math.log(v["vllm/nvidia"][k] / v0["vllm/nvidia"][k])) for k in v0["vllm/nvidia"]) > 1.0
