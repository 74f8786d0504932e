"""`agent optimize --backend docker` on real containers (issue 19 items 2 and 3): the loop
launches the testbed image, streams each container's log into the run dir, benches, evals and
stops. Faults on the way: Ctrl-C while a container starts (it is removed within seconds); kill -9
of the agent while its container runs, then `agent resume`, which removes that container (and
only containers this run recorded: another one with the project's labels survives); a container
killed mid-benchmark (the failures are counted and the run goes on to its end). Afterwards
nothing is left: no container of the run in `docker ps -a`, no records."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from agent.ledger import Ledger
from tests.docker.conftest import REPO, agent_argv, ours, settings

pytestmark = [pytest.mark.docker, pytest.mark.testbed, pytest.mark.slow]


def _optimize(testbed, image, run_dir: Path, budget: int = 2) -> list[str]:
    return agent_argv("optimize", "--model", testbed.model_name, "--hw", "cpu", "--backend", "docker",
                      "--model-path", str(testbed.model_dir), "--image", f"vllm={image}",
                      "--config", str(settings(testbed)), "--budget", str(budget), "--approve", "never",
                      "--run-dir", str(run_dir), "--json")


def _wait(cond, timeout_s: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout_s
    while not (got := cond()):
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the agent exited {proc.returncode} before {what}: {proc.communicate()[1][-3000:]}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)  # polling the engine / the run dir; the condition is re-checked each time
    return got


def _run_containers(client, run_dir: Path) -> list:
    """The containers this run's records name (the agent writes a record right after each start)."""
    ids = [json.loads(p.read_text())["id"] for p in (run_dir / "procs").glob("container-*.json")] \
        if (run_dir / "procs").is_dir() else []
    return [c for c in ours(client) if c.id in ids]


def _posts(run_dir: Path) -> int:
    return sum(p.read_text(errors="replace").count("POST /v1/completions") for p in run_dir.glob("server-*.log"))


def test_ctrl_c_while_a_container_starts_removes_it(testbed, testbed_image, docker_engine, tmp_path):
    run_dir = tmp_path / "run"
    agent = subprocess.Popen(_optimize(testbed, testbed_image, run_dir), cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    (c,) = _wait(lambda: _run_containers(docker_engine, run_dir), 300, "a container", agent)
    agent.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    agent.communicate(timeout=60)
    assert agent.returncode != 0 and time.monotonic() - t0 < 30
    assert [x for x in ours(docker_engine) if x.id == c.id] == []
    assert not list((run_dir / "procs").glob("*.json"))


@pytest.fixture(scope="module")
def resumed_run(testbed, testbed_image, docker_engine, tmp_path_factory):
    """Killed -9 while its first container runs, resumed; the resumed run's second trial's
    container is killed mid-benchmark."""
    run_dir = tmp_path_factory.mktemp("optimize-docker") / "run"
    decoy = docker_engine.containers.run(testbed_image, command=["sleep", "600"], detach=True, network_mode="none",
                                         labels={"inferloop": "1", "inferloop.record": "another-run"})
    try:
        agent = subprocess.Popen(_optimize(testbed, testbed_image, run_dir), cwd=REPO, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        (left,) = _wait(lambda: _run_containers(docker_engine, run_dir), 300, "the first container", agent)
        os.kill(agent.pid, signal.SIGKILL)
        agent.communicate()
        left.reload()
        assert left.status == "running"  # kill -9 gives the agent no chance to stop it
        resume = subprocess.Popen(agent_argv("resume", str(run_dir), "--json"), cwd=REPO, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        # the second trial's container, once its benchmark is under way: killed by the engine
        _wait(lambda: len(list(run_dir.glob("server-*.log"))) >= 3, 900, "the second trial's launch", resume)
        latest = max(run_dir.glob("server-*.log"), key=lambda p: p.stat().st_mtime)
        _wait(lambda: latest.read_text(errors="replace").count("POST /v1/completions") >= 4, 600,
              "the second trial's benchmark", resume)
        (victim,) = _run_containers(docker_engine, run_dir)
        victim.kill()
        out, err = resume.communicate(timeout=900)
        assert resume.returncode == 0, err[-4000:]
        decoy.reload()
        yield run_dir, json.loads(out), left, victim, decoy, err
    finally:
        decoy.remove(force=True)


def test_resume_removes_only_what_the_killed_run_started(resumed_run, docker_engine):
    run_dir, out, left, _, decoy, _ = resumed_run
    led = Ledger(run_dir)
    reaps = [e for e in led.events() if e["kind"] == "reap"]
    assert reaps and left.name in reaps[0]["message"], reaps
    assert decoy.status == "running"  # the project's labels, another run's record: left alone


def test_the_loop_ran_on_containers_and_went_on_after_the_kill(resumed_run):
    run_dir, out, _, _, _, _ = resumed_run
    led = Ledger(run_dir)
    assert out["status"] == "done" and led.launched_count() == 2
    base, last = led.trials()
    (m,) = [x["data"] for x in led.measurements(base["id"], "candidate")]
    assert base["outcome"] == "launched" and m["knee_tok_s"] and m["evals"]["qa"]  # benched and evaluated
    # the second trial's server died under load: its failed requests counted, the run went on to its end
    assert last["outcome"] == "launched" and last["verdict"] in ("failed", "reverted"), last
    sweeps = [p for x in led.measurements(last["id"], "candidate") for p in x["data"]["sweep"]]
    assert "requests refused" in (last["reason"] or "") or any(p["success"] < 1 for p in sweeps), (last, sweeps)
    # vLLM's start-up banner, streamed into the run dir: the resumed baseline's and the second trial's
    # (the first container's output stopped reaching the run dir when its agent was killed)
    served = [p for p in run_dir.glob("server-*.log") if "version 0.32.0" in p.read_text(errors="replace")]
    assert len(served) >= 2
    assert "/inferloop/model" in (run_dir / "launch.txt").read_text()


def test_nothing_left_behind(resumed_run, docker_engine):
    run_dir, _, left, victim, _, _ = resumed_run
    gone = {left.id, victim.id}
    assert not [c for c in docker_engine.containers.list(all=True) if c.id in gone]
    assert not list((run_dir / "procs").glob("*.json"))
    assert docker_engine.volumes.list(filters={"dangling": True}) == []  # no anonymous volume left over
    # every container filesystem still mounted belongs to a running container (here: the decoy)
    merged = [ln for ln in Path("/proc/self/mountinfo").read_text().splitlines() if "/overlay2/" in ln
              and ln.split()[4].endswith("/merged")]
    assert len(merged) == len(docker_engine.containers.list())
