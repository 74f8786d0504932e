"""`agent optimize --backend local --framework transformers --hw h200` on the device, sized to
fit one device command: the loop against transformers serve.

The same code path as the CLI (agent.run.start: the LangGraph loop, the ledger, the keep/revert
rule, the report; the CLI gets the same three pieces from the ground registry) with each piece
sized from this script's arguments through the factories `agent.run.start` takes:
- GpuSandbox (sandboxes/transformers_serve.py): transformers serve on the one GPU, config knobs, warm-up;
- ParitySuite (tools/evals/context_parity.py): greedy-output parity against the reference configuration;
- GpuPlanner (below): the built-in planner on a one-GPU, one-checkpoint ground.
The measurement is sized to fit one 10-minute device command (see `measure_config`).

    python -m tests.gpu.loop --model-dir /tmp/glm52-mini --run-dir $OUT/run --time-budget 330
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from agent.config import Budget, Gate, Measure, RunConfig, Slo, Target
from agent.planners.builtin import BuiltinPlanner
from sandboxes.transformers_serve import PLANNER_SCOPE
from tools.bench.workload import Workload


class GpuPlanner(BuiltinPlanner):
    """The built-in planner in the scope the transformers-serve ground registers (PLANNER_SCOPE):
    the baseline is the framework's defaults on the one GPU; flags are screened (categorical knobs
    one at a time, the MoE experts implementation among them) and searched (TPE over the numeric
    ones). Not walked: precision (one bf16 checkpoint; the server's only quantization is
    bitsandbytes, absent there), parallelism (one GPU), MoE tuning (no tuner). `agent optimize
    --backend local --framework transformers` builds the same planner from the registry."""

    name = "builtin-gpu"

    def __init__(self, **kw):
        super().__init__(**PLANNER_SCOPE, **kw)


def measure_config(a) -> Measure:
    return Measure(workload=Workload(input_len=a.input_len, output_len=a.output_len, prefix_hit=0.0),
                   single_stream=Workload(input_len=a.input_len, output_len=a.output_len, prefix_hit=0.0),
                   requests_per_point=a.requests, start_rps=a.start_rps, max_points=a.max_points,
                   duration_s=a.duration, growth=a.growth,  # ignored by a Measure without them
                   bisect_steps=a.bisect, single_stream_requests=a.single_requests, eval_items=max(a.parity_items, 10))


def export_ledger(run_dir: Path) -> dict:
    """The whole ledger as plain JSON (trials with their measurements, patches, events, meta)."""
    from agent.ledger import Ledger
    led = Ledger(run_dir)
    try:
        trials = []
        for t in led.trials():
            t = dict(t)
            t["measurements"] = led.measurements(t["id"])
            trials.append(t)
        return {"config": led.meta("config"), "status": led.meta("status"), "stop_reason": led.meta("stop_reason"),
                "incumbent": led.incumbent(), "trials": trials, "patches": led.patches(),
                "events": led.events()}
    finally:
        led.close()


def _server_env(a) -> dict | None:
    if a.server_pythonpath is None:
        return None
    import os
    return {**os.environ, "PYTHONPATH": a.server_pythonpath}


def run(a) -> dict:
    from agent import run as runlib
    from tools.evals.context_parity import ParitySuite
    from sandboxes.transformers_serve import GpuSandbox

    run_dir = Path(a.run_dir)
    model_dir = str(Path(a.model_dir).resolve())
    cfg = RunConfig(target=Target(model=model_dir, hw=a.hw, model_path=model_dir), backend="local",
                    objective=a.objective, approve="never",
                    budget=Budget(trials=a.trials, time_s=a.time_budget), slo=Slo(ttft_p95_s=a.slo),
                    gate=Gate(noise_floor=a.noise_floor, margin_points=a.margin_points),
                    measure=measure_config(a), seed=a.seed, planner="builtin")
    holder: dict = {}

    def sandbox(cfg, card, hw):
        holder["sb"] = GpuSandbox(model_dir, python=a.server_python, base_env=_server_env(a),
                                  warmup=Workload(input_len=a.input_len, output_len=a.output_len, prefix_hit=0.0),
                                  warmup_requests=a.warmup_requests, ready_timeout_s=a.ready_timeout)
        return holder["sb"]

    def suite(cfg, card, hw, sb):
        return ParitySuite(run_dir, items=a.parity_items, cuts=a.parity_cuts, tokens=a.parity_tokens,
                           concurrency=a.parity_concurrency)

    t0 = time.time()
    kw = dict(sandbox_factory=sandbox, suite_factory=suite, planner=GpuPlanner(), progress=lambda s: print(s, flush=True))
    if a.resume:
        # Continue a run another device call stopped (its ledger and checkpoints travelled back):
        # the same config and measurement, with `--time-budget` more seconds of ground time. The
        # model is rebuilt from the same config and seed (make_model), at the same path.
        from agent.ledger import Ledger
        led = Ledger(run_dir)
        old = RunConfig.model_validate(led.meta("config"))
        led.set_meta("config", old.model_copy(update={"budget": Budget(trials=None, time_s=a.time_budget)})
                     .model_dump(mode="json"))
        led.event("resume", f"resumed on another device call with {a.time_budget:.0f} s more ground time")
        led.close()
        out = runlib.resume(run_dir, **kw)
    else:
        out = runlib.start(cfg, run_dir, **kw)
    out["wall_s"] = round(time.time() - t0, 1)
    ledger = export_ledger(run_dir)
    ledger["launches"] = holder["sb"].launches if "sb" in holder else []
    (run_dir / "ledger.json").write_text(json.dumps(ledger, indent=1, default=str) + "\n")
    (run_dir / "summary.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--resume", action="store_true", help="continue the run in --run-dir (a longer time budget)")
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--hw", default="h200")
    ap.add_argument("--objective", default="knee")
    ap.add_argument("--time-budget", type=float, default=330.0, help="loop seconds before it stops proposing")
    ap.add_argument("--trials", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--requests", type=int, default=8, help="fewest requests per sweep point")
    ap.add_argument("--duration", type=float, default=6.0, help="seconds of load per sweep point (rate x this)")
    ap.add_argument("--growth", type=float, default=2.0, help="rate multiplier while the SLO holds")
    ap.add_argument("--start-rps", type=float, default=1.0)
    ap.add_argument("--max-points", type=int, default=6)
    ap.add_argument("--bisect", type=int, default=1)
    ap.add_argument("--single-requests", type=int, default=2)
    ap.add_argument("--slo", type=float, default=1.5, help="TTFT p95 SLO (s) that defines the knee")
    ap.add_argument("--noise-floor", type=float, default=0.05)
    ap.add_argument("--margin-points", type=float, default=2.0, help="parity non-inferiority margin (points)")
    ap.add_argument("--parity-items", type=int, default=12, help="prompts (the paired gate's items)")
    ap.add_argument("--parity-cuts", type=int, default=8, help="contexts per prompt where the next tokens are compared")
    ap.add_argument("--parity-tokens", type=int, default=1, help="greedy tokens compared per context")
    ap.add_argument("--parity-concurrency", type=int, default=1)
    ap.add_argument("--warmup-requests", type=int, default=4)
    ap.add_argument("--ready-timeout", type=float, default=240.0)
    ap.add_argument("--server-python", default=sys.executable, help="interpreter that runs transformers serve")
    ap.add_argument("--server-pythonpath", default=None, help="PYTHONPATH for the server (default: inherited)")
    return ap


def main() -> None:
    out = run(parser().parse_args())
    print(json.dumps(out, default=str))


if __name__ == "__main__":
    main()
