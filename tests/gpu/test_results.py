"""The recorded H200 outcomes under gpu/results/ hang together: what tools/hardware.py claims was
measured is what the probe measured, and the probe saw the classes and kernels the adapter names."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.frameworks import get
from tools.hardware import get_hardware

RESULTS = Path(__file__).resolve().parents[2] / "gpu" / "results"
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
