"""The recorded H200 outcomes under tests/gpu/results/ hang together: what tools/hardware.py claims was
measured is what the probe measured, and the probe saw the classes and kernels the adapter names."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.frameworks import get
from tools.hardware import get_hardware

RESULTS = Path(__file__).resolve().parent / "results"
PROBE = RESULTS / "probe"


def _json(p: Path) -> dict:
    if not p.is_file():
        pytest.skip(f"{p} not recorded")
    return json.loads(p.read_text())


def test_h200_profile_holds_the_probed_ceilings():
    hw = _json(PROBE / "hw.json")
    m = get_hardware("h200").measured
    assert m["copy_tb_s"] == pytest.approx(hw["copy_tb_s"], abs=0.01)
    assert m["bf16_mm_tflops"] == pytest.approx(hw["bf16_mm_tflops"], abs=1)
    # measured ceilings sit below the datasheet peaks, as they must
    assert m["copy_tb_s"] < get_hardware("h200").hbm_tb_s and m["bf16_mm_tflops"] < get_hardware("h200").tflops["bf16"]
    assert hw["spread_mm"] < 0.2 and len(hw["mm_reps_s"]) >= 10


def test_probe_saw_what_the_adapter_assumes():
    help_text = (PROBE / "serve_help.txt").read_text() if (PROBE / "serve_help.txt").is_file() else pytest.skip("no help")
    fw = get("transformers")
    for flag, spec in fw.flags.items():
        if flag == "--experts-implementation":
            assert "--experts-implementation" not in help_text  # a config knob, not an option
            continue
        assert flag in help_text, flag
    for impl in ("deepgemm", "batched_mm", "grouped_mm", "sonicmoe"):
        assert f'"{impl}"' in help_text
    model = _json(PROBE / "model-glm_moe_dsa.json")
    assert model["class"] == "GlmMoeDsaForCausalLM" and model["transformers"] == "5.17.0"


def test_offline_variants_measured_each_experts_implementation():
    off = _json(PROBE / "offline-glm_moe_dsa.json")
    v = off["variants"]
    assert v["reference grouped_mm/sdpa/bf16"]["agree"][str(off["tokens"])] == 1.0  # deterministic reference
    assert "kernels" in v["experts deepgemm"]["error"]  # not installable there: no search choice for it
    assert v["experts eager"]["experts_implementation"] == "eager"
    assert v["experts eager"]["batch64_tok_s"] < v["reference grouped_mm/sdpa/bf16"]["batch64_tok_s"]


RUNS = ("h200-glm52-mini", "h200-glm45-mini")


@pytest.mark.parametrize("run", RUNS)
def test_recorded_run_kept_a_gain_and_reverted_a_loss(run):
    ledger = _json(RESULTS / run / "ledger.json")
    result = _json(RESULTS / run / "result.json")
    trials = ledger["trials"]
    measured = [t for t in trials if t["measurements"]]
    assert len(measured) >= 4  # the real server launched and was measured several times
    assert all(t["candidate"]["framework"] == "transformers" for t in trials)
    kept = [t for t in trials if t["verdict"] == "kept" and t["id"] != trials[0]["id"]]
    assert kept, "no change kept"
    floor = ledger["config"]["gate"]["noise_floor"] * ledger["config"]["gate"]["clear_mult"]
    assert all(t["numbers"]["gain"] > floor for t in kept)
    reverted = [t for t in trials if t["verdict"] == "reverted"]
    assert reverted and all(t["numbers"]["candidate_median"] < t["numbers"]["incumbent_median"] for t in reverted)
    # the recorded best is the last kept trial, and its numbers are the ledger's
    best = result["best"]
    assert best["trial"] == kept[-1]["id"]
    assert best["knee_tok_s"] == pytest.approx(kept[-1]["measurements"][0]["data"]["knee_tok_s"])


@pytest.mark.parametrize("run", RUNS)
def test_experts_implementation_was_chosen_by_measurement(run):
    trials = _json(RESULTS / run / "ledger.json")["trials"]
    tried = {t["candidate"]["flags"].get("--experts-implementation"): t["verdict"] for t in trials
             if "--experts-implementation" in t["candidate"]["flags"]}
    assert {"batched_mm", "eager"} <= set(tried)  # both alternatives to the grouped_mm default
    assert all(v in ("kept", "reverted", "failed") for v in tried.values())


def test_repeat_measured_the_noise_of_the_kept_gain():
    rep = _json(RESULTS / "h200-glm52-mini" / "repeat.json")
    base = [r["knee_tok_s"] for r in rep["rows"] if r["trial"] == 1] + [rep["recorded"]["1"][0]["knee_tok_s"]]
    cand = [r["knee_tok_s"] for r in rep["rows"] if r["trial"] == 3] + [rep["recorded"]["3"][0]["knee_tok_s"]]
    spread = (max(base) - min(base)) / min(base)
    assert len(base) >= 3 and spread < 0.05
    assert min(cand) > max(base) * (1 + 3 * spread)  # separated, by more than the measured spread


def test_estimate_error_is_computed_from_the_recorded_runs():
    est = _json(RESULTS / "estimate_vs_measured.json")
    for run in RUNS:
        res = _json(RESULTS / run / "result.json")
        row = est["runs"][run]
        assert row["measured"]["best"]["knee_tok_s"] == pytest.approx(res["best"]["knee_tok_s"])
        e = row["estimate"]["vllm"]["knee_vs_measured_best"]
        assert e["ratio"] == pytest.approx(e["estimate"] / res["best"]["knee_tok_s"])
        assert row["batch1_step_floor_ms"] < min(row["measured_single_stream_ms_per_token"].values())
