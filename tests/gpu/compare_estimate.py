"""`agent estimate` for the GPU test models on h200 against what the H200 measured.

Runs the estimate (the simulator's GPU-free prediction) with the loop's workload (256 in / 32 out,
no prefix sharing, TTFT p95 SLO 2 s) for each framework the simulator models, reads the measured
baseline and best of each recorded run, and writes tests/gpu/results/estimate_vs_measured.json with the
errors. Also the floor set by the measured copy bandwidth: a batch-1 decode step must read the
active weights once.

    python -m tests.gpu.compare_estimate
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.gpu.make_model import config_dict

RESULTS = Path(__file__).resolve().parent / "results"
RUNS = {"h200-glm52-mini": "glm_moe_dsa", "h200-glm45-mini": "glm4_moe"}
VOCAB = 49152  # the SmolLM2 tokenizer's
WORKLOAD = ["--input-len", "256", "--output-len", "32", "--prefix-hit", "0", "--ttft-slo", "2"]


def error(estimate: float, measured: float) -> dict:
    """Relative error of the estimate, and the ratio, against a measurement."""
    return {"estimate": estimate, "measured": measured, "ratio": estimate / measured,
            "error_pct": 100.0 * (estimate - measured) / measured}


def estimate(model_dir: Path, framework: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "agent.cli", "estimate", "--model", str(model_dir), "--hw", "h200",
                          "--framework", framework, *WORKLOAD, "--json"], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"agent estimate failed: {out.stderr[-500:]}")
    return json.loads(out.stdout)


def measured(run: str) -> dict:
    res = json.loads((RESULTS / run / "result.json").read_text())
    return {k: {"flags": res[k]["flags"], "knee_tok_s": res[k]["knee_tok_s"], "knee_rps": res[k]["knee_rps"],
                "single_stream_tok_s": res[k]["single_stream_tok_s"]} for k in ("baseline", "best")}


def main() -> None:
    from tools.hardware import get_hardware
    from tools.models import get_model
    hw = get_hardware("h200")
    out: dict = {"workload": WORKLOAD, "hw": "h200", "measured_ceilings": hw.measured, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for run, arch in RUNS.items():
            d = Path(tmp) / run
            d.mkdir()
            (d / "config.json").write_text(json.dumps(config_dict("gpu", VOCAB, arch)))
            card = get_model(str(d))
            m = measured(run)
            floor_s = card.weight_bytes("bf16") * card.active_params / card.total_params / (hw.measured["copy_tb_s"] * 1e12)
            row = {"measured": m, "batch1_step_floor_ms": 1e3 * floor_s,
                   "measured_single_stream_ms_per_token": {k: 1e3 / v["single_stream_tok_s"] for k, v in m.items()},
                   "estimate": {}}
            for fw in ("vllm", "sglang"):
                e = estimate(d, fw)
                k = e["knee"] or {}
                low = min(e["sweep"], key=lambda p: p["offered_rps"])
                row["estimate"][fw] = {"knee_tok_s": k.get("tok_s"), "knee_rps": k.get("rps"),
                                       "tpot_p50_ms_low_load": 1e3 * (low.get("tpot_p50_s") or 0),
                                       "knee_vs_measured_best": error(k["tok_s"], m["best"]["knee_tok_s"]),
                                       "knee_vs_measured_baseline": error(k["tok_s"], m["baseline"]["knee_tok_s"])}
            out["runs"][run] = row
    (RESULTS / "estimate_vs_measured.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
