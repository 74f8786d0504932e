"""Trials side by side on one host get devices of their own (issue 18): with `--workers N` and no
cluster, a real ground's node is split N ways (or into the ground's own per-trial count), the
planner plans for that share, and each Ray task asks for it, so Ray hands the trials disjoint
GPUs through the visible-devices variable the server inherits."""
import json
import subprocess
import sys

import pytest

from agent.config import gpus_per_trial
from agent.errors import BadInput
from tests.agent.conftest import small_config
from tools.hardware import get_hardware, probe_cpu

pytest.importorskip("ray")


@pytest.mark.parametrize("backend,framework,hw,workers,cluster,want", [
    ("local", None, "h200", 2, None, 4),  # an 8-GPU node, two trials at once: four GPUs each
    ("local", None, "mi355x", 8, None, 1),
    ("local", "transformers", "h200", 2, None, 1),  # the GPU ground serves on one GPU per trial
    ("docker", None, "b200", 4, None, 2),
    ("local", None, "h200", 1, None, 0),  # one trial at a time: the whole node
    ("local", None, "h200", 4, "10.0.0.1:6379", 0),  # a cluster: one trial per node, all its devices
    ("sim", None, "h200", 4, None, 0),  # sim nodes have nothing to share
])
def test_the_share_of_devices_each_trial_gets(backend, framework, hw, workers, cluster, want):
    cfg = small_config(backend=backend, framework=framework, workers=workers, cluster=cluster)
    assert gpus_per_trial(cfg, get_hardware(hw)) == want


def test_a_cpu_host_and_too_many_workers(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert gpus_per_trial(small_config(backend="local", workers=2), probe_cpu()) == 0
    with pytest.raises(BadInput, match=r"--workers 16 on one h200 host of 8 GPUs.*--workers 8 or fewer"):
        gpus_per_trial(small_config(backend="local", workers=16), get_hardware("h200"))


PROBE = r'''
import asyncio, json, os, sys
import ray
from agent.cluster import RayExecutor
from agent.errors import BadInput

@ray.remote(num_cpus=0)
class Barrier:
    def __init__(self, n):
        self.n, self.seen, self.ev = n, 0, asyncio.Event()
    async def arrive(self):
        self.seen += 1
        if self.seen >= self.n:
            self.ev.set()
        await self.ev.wait()

def probe(task):
    ray.get(ray.get_actor("barrier").arrive.remote())  # returns only once both tasks run at once
    return os.environ.get("CUDA_VISIBLE_DEVICES")

ex = RayExecutor(2, gpus=1, num_gpus=2, num_cpus=2, fn=probe)
barrier = Barrier.options(name="barrier").remote(2)  # held: an actor without a handle is gone
hs = [ex.submit(i) for i in range(2)]
got = sorted(ex.wait([h])[1] for h in hs)
ex.close()
try:
    RayExecutor(2, gpus=1, num_gpus=0, num_cpus=2)
    refused = None
except BadInput as e:
    refused = str(e)
print(json.dumps({"devices": got, "refused": refused}))
'''


def test_two_trials_at_once_get_disjoint_gpus(tmp_path):
    # Its own process: Ray is initialized once per process, and this one offers two (logical) GPUs.
    p = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["devices"] == ["0", "1"], out
    assert "each trial needs 1 GPU(s) and Ray finds 0" in out["refused"]


def test_the_planner_plans_for_its_share(tmp_path):
    """Two trials at once on one 8-GPU MI355X host: the baseline is TP4, not the node's TP8."""
    from agent import nodes
    from agent import run as runlib
    from tests.agent.conftest import fake_factory
    for workers, tp in ((1, 8), (2, 4)):
        rd = tmp_path / f"w{workers}"
        rt = runlib.open_runtime(rd, small_config(backend="local", workers=workers), sandbox_factory=fake_factory())
        try:
            assert rt.planner.propose(nodes.plan_context(rt, None)).candidate.parallel.tp == tp
        finally:
            rt.ledger.close()
            runlib.run_lock.release(rd)


def test_the_planner_starts_at_the_precision_of_the_node_s_checkpoint(tmp_path):
    """A real node's sandbox says what its checkpoint holds (sandboxes.local.RealNode.weights)."""
    from agent import nodes
    from agent import run as runlib
    from tests.agent.conftest import fake_factory
    made = fake_factory()

    def fp8_node(cfg, card, hw):
        sb = made(cfg, card, hw)
        sb.weights = ("fp8",)
        return sb
    rd = tmp_path / "run"
    rt = runlib.open_runtime(rd, small_config(backend="local"), sandbox_factory=fp8_node)
    try:
        assert rt.planner.propose(nodes.plan_context(rt, None)).candidate.weights == "fp8"
    finally:
        rt.ledger.close()
        runlib.run_lock.release(rd)


def test_more_trials_at_once_than_devices_exit_2_before_anything_runs(agent, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    r = agent("optimize", "--model", "glm-5.2", "--hw", "h200", "--backend", "local", "--model-path", str(model),
              "--workers", "16", "--budget", "2", "--run-dir", str(tmp_path / "run"))
    assert r.returncode == 2, r.stderr[-2000:]
    assert "--workers 16 on one h200 host of 8 GPUs" in r.stdout + r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run").exists()
