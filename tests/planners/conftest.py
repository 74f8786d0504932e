"""A planning context with a real ledger's shape: a kept baseline and a failed MTP launch whose log
sits in the run dir, and the sim's sglang source tree as a real git repo in tmp_path."""
from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import RunConfig, Target
from agent.planners.base import PlanContext
from tools.candidate import Candidate, Parallel
from tools.hardware import get_hardware
from tools.models import get_model

MISMATCH = ("ValueError: shape mismatch for model.eh_proj.weight: param [6144, 6144] uint8 (mxfp4) vs loaded "
            "weight model.layers.78.eh_proj.weight [6144, 12288] bfloat16")
KEY = "sk-inferloop-test-DO-NOT-LEAK-7f3a9c"


def trial(tid, phase, cand: Candidate, verdict, *, kind="config", outcome="launched", reason="", diagnoses=(),
          log="", fixes=None, description=None, source="builtin"):
    return {"id": tid, "phase": phase, "kind": kind, "description": description or f"trial {tid}",
            "rationale": "", "candidate": cand.model_dump(mode="json"), "incumbent_id": None,
            "proposal": {"fixes_trial": fixes, "params": {}, "source": source}, "status": "done", "outcome": outcome,
            "verdict": verdict, "reason": reason, "reason_code": None, "numbers": {"objective": 100.0},
            "diagnoses": list(diagnoses),
            "log_excerpt": log, "patch_id": None}


def make_ctx(run_dir: Path, *, log_text: str = MISMATCH, rejected=None) -> PlanContext:
    from sandboxes.sim import SimSandbox
    sb = SimSandbox("glm-5.2", "mi355x")
    base = Candidate(framework="sglang", weights="mxfp4", parallel=Parallel(tp=8))
    spec = base.model_copy(update={"flags": {"--speculative-algorithm": "NEXTN", "--speculative-num-steps": 3,
                                              "--speculative-eagle-topk": 1, "--speculative-num-draft-tokens": 4}})
    log_dir = Path(run_dir) / "trials" / "2" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "sim-launch-002.log").write_text("[startup] Load draft model (NextN) begin.\n" + log_text + "\n")
    trials = [trial(1, "framework", base, "kept"),
              trial(2, "speculative", spec, "failed", outcome="launch_failed", reason="launch failed: shape_mismatch",
                    diagnoses=[{"kind": "shape_mismatch", "message": "weight shape mismatch", "evidence": [MISMATCH],
                                "details": {}, "fatal": True}], log=log_text)]
    cfg = RunConfig(target=Target(model="glm-5.2", hw="mi355x"), planner="llm", llm_model="scripted")
    return PlanContext(config=cfg, card=get_model("glm-5.2"), hw=get_hardware("mi355x"), trials=trials,
                       measurements=lambda tid: [], incumbent_id=1, frameworks=("sglang",),
                       source_tree=lambda fw: sb.source_tree(fw, run_dir), rejected=rejected or {})


@pytest.fixture
def ctx(tmp_path):
    return make_ctx(tmp_path / "run")
