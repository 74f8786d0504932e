"""`agent optimize --backend local --framework transformers --hw h200 --model-path DIR` runs the GPU
ground's loop from the product's CLI: the transformers-serve sandbox (registered under local), its
context-parity gate and the planner narrowed to what one GPU and one checkpoint can vary. No GPU
here: the server is tests/gpu/fake_transformers_serve.py (the adapter's argv, a real loopback HTTP
server); everything else is the code the device runs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from agent.ledger import Ledger
from tests.gpu.make_model import config_dict

HERE = Path(__file__).resolve().parent
SMALL = """
measure: {workload: {input_len: 32, output_len: 4, prefix_hit: 0.0},
          single_stream: {input_len: 32, output_len: 4, prefix_hit: 0.0},
          requests_per_point: 4, duration_s: 1.0, start_rps: 2.0, max_points: 2, bisect_steps: 0,
          single_stream_requests: 1, eval_items: 10}
slo: {ttft_p95_s: 5.0}
"""


@pytest.fixture
def ground(tmp_path):
    model = tmp_path / "glm52-tiny"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config_dict("tiny", 1000)))
    py = tmp_path / "fakepython"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'fake_transformers_serve.py'} \"$@\"\n")
    py.chmod(0o755)
    cfg = tmp_path / "small.yaml"
    cfg.write_text(SMALL)
    return model, py, cfg


def test_optimize_runs_the_gpu_ground_loop(agent, ground, tmp_path):
    model, py, cfg = ground
    rd = tmp_path / "run"
    r = agent("optimize", "--backend", "local", "--framework", "transformers", "--hw", "h200",
              "--model-path", str(model), "--python", str(py), "--config", str(cfg), "--budget", "3",
              "--approve", "never", "--json", "--run-dir", str(rd))
    assert r.returncode in (0, None), r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "done" and out["best"]["framework"] == "transformers", out
    led = Ledger(rd)
    trials = led.trials()
    assert trials[0]["candidate"]["framework"] == "transformers"
    assert trials[0]["candidate"]["parallel"]["tp"] == 1 and trials[0]["candidate"]["flags"] == {}
    # one bf16 checkpoint on one GPU: no precision, parallelism or MoE-tuning phase is walked
    assert {t["phase"] for t in trials} <= {"framework", "speculative", "flags"}
    assert all(t["candidate"]["weights"] == "bf16" and t["candidate"]["parallel"]["tp"] == 1 for t in trials)
    # the gate is greedy parity against the first configuration measured (the baseline)
    assert (rd / "parity_reference.json").is_file()
    tasks = {task for t in trials for m in led.measurements(t["id"]) for task in (m["data"].get("evals") or {})}
    assert tasks == {"greedy_parity"}, tasks


def test_framework_names_the_bad_value(agent, ground, tmp_path):
    model, py, _ = ground
    r = agent("optimize", "--backend", "local", "--framework", "tgi", "--hw", "h200", "--model-path", str(model),
              "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "unknown framework 'tgi'" in r.stderr and "Traceback" not in r.stderr


def test_model_defaults_to_the_checkpoint(agent, tmp_path):
    r = agent("optimize", "--hw", "h200", "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2 and "--model" in r.stderr and "Traceback" not in r.stderr
