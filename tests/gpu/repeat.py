"""Measure the noise the loop assumed: the same candidates again, interleaved, with the loop's own
bench (agent.measure.bench) and the recorded run's config (workload, sweep, SLO).

    python -m tests.gpu.repeat --run-dir resume/dsa --model-dir /tmp/model-glm_moe_dsa --trials 1,3,1 --out $OUT/repeat.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from agent.config import RunConfig
from agent.ledger import Ledger
from agent.measure import bench
from tools.bench.workload import Workload
from tools.candidate import Candidate
from tools.hardware import get_hardware


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True)
    ap.add_argument("--model-dir", required=True)
    ap.add_argument("--trials", default="1,3,1", help="trial ids of the run to measure again, in this order")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    from sandboxes.transformers_serve import GpuSandbox
    led = Ledger(a.run_dir)
    cfg = RunConfig.model_validate(led.meta("config"))
    cands = {int(t["id"]): Candidate.model_validate(t["candidate"]) for t in led.trials()}
    recorded = {int(t["id"]): [m["data"] for m in led.measurements(t["id"], "candidate")] for t in led.trials()}
    led.close()
    w = cfg.measure.workload
    sb = GpuSandbox(a.model_dir, python=sys.executable, warmup=Workload(input_len=w.input_len, output_len=w.output_len,
                                                                        prefix_hit=0.0), warmup_requests=4)
    hw = get_hardware(cfg.target.hw)
    rows = []
    for i, tid in enumerate(int(x) for x in a.trials.split(",")):
        t0 = time.time()
        with sb.launch(cands[tid], Path("/tmp/repeat") / f"{i}-t{tid}") as server:
            d = bench(server, cfg, hw, 1, cfg.seed + 7919 * tid)  # the seed the loop's first measurement used
        rows.append({"trial": tid, "flags": cands[tid].flags, "knee_tok_s": d["knee_tok_s"], "knee_rps": d["knee_rps"],
                     "single_stream_tok_s": d["single_stream_tok_s"], "wall_s": round(time.time() - t0, 1),
                     "sweep": d["sweep"]})
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "sweep"}), flush=True)
        Path(a.out).write_text(json.dumps({"run": a.run_dir, "rows": rows, "launches": sb.launches,
                                           "recorded": {str(k): [{x: m.get(x) for x in ("knee_tok_s", "knee_rps",
                                                                                         "single_stream_tok_s")}
                                                                  for m in v] for k, v in recorded.items()}},
                                          indent=1))


if __name__ == "__main__":
    main()
