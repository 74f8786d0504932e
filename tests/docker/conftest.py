"""Fixtures for tests against a real docker engine (marker `docker`, issue 19).

`docker_engine`: a client of a running engine. When none answers and this process may start one
(root, `dockerd` installed or installable with apt-get), it starts `dockerd --iptables=false
--bridge=none` for the session and stops that daemon (only that one, by its pid) at the end;
otherwise the test skips, saying why. `testbed_image`: the testbed's image
(sandboxes/testbed/image.py), built on first use and cached by content.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.agent_process import agent as agent_argv  # noqa: F401  (the docker tests import it from here)

REPO = Path(__file__).resolve().parents[2]


def _apt_install(*packages: str) -> str | None:
    """Install Debian packages; None when done, else why not."""
    if shutil.which("apt-get") is None:
        return "apt-get is not available"
    for cmd in (["apt-get", "install", "-y", "-q", *packages], ["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", *packages]):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        if r.returncode == 0 and cmd[1] == "install":
            return None
    return f"apt-get install {' '.join(packages)} failed: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"


def _wait_engine(proc: subprocess.Popen, log: Path, timeout_s: float = 90):
    from sandboxes.docker import connect
    from tools.errors import BadInput
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return connect()
        except BadInput:
            if proc.poll() is not None or time.monotonic() > deadline:
                return None
            time.sleep(0.5)  # polling the engine's socket until it answers; re-checked each time


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory):
    from sandboxes.docker import connect
    from tools.errors import BadInput
    try:
        yield connect()
        return
    except BadInput as e:
        why = str(e)
    if os.geteuid() != 0:
        pytest.skip(f"no docker engine here ({why}), and only root may start one")
    wanted = [p for tool, p in (("dockerd", "docker.io"), ("docker", "docker.io"), ("debootstrap", "debootstrap"))
              if shutil.which(tool) is None]
    if wanted:
        err = _apt_install(*sorted(set(wanted)))
        if err:
            pytest.skip(f"no docker engine here, and it cannot be installed: {err}")
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    with open(log, "wb") as f:  # no iptables, no bridge: host networking only, as the tests use
        proc = subprocess.Popen(["dockerd", "--iptables=false", "--bridge=none"], stdout=f, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    client = _wait_engine(proc, log)
    if client is None:
        proc.kill()
        proc.wait()
        pytest.skip(f"dockerd did not come up: {log.read_text(errors='replace').strip().splitlines()[-1:]}")
    try:
        yield client
    finally:
        proc.terminate()  # only the daemon started here
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def testbed_image(testbed, docker_engine, request) -> str:
    from sandboxes.testbed import image
    from tests.conftest import _terminal
    with _terminal(request.config):
        t0 = time.monotonic()
        try:
            name = image.build(testbed.root, say=lambda m: print(m, flush=True))
        except image.ImageError as e:
            pytest.fail(f"cannot build the testbed image: {e}")
        print(f"[testbed-image] ready in {time.monotonic() - t0:.0f} s", flush=True)
    return name


def ours(client, label: str = "inferloop") -> list:
    """Containers of this project's sandboxes (any state)."""
    return client.containers.list(all=True, filters={"label": label})


def sandbox(testbed, image: str, **kw):
    from sandboxes.docker import DockerSandbox
    return DockerSandbox({"vllm": image}, testbed.model_dir, model_name=testbed.model_name, gpu="none",
                         shm_size="2g", **{"ready_timeout_s": 900, **kw})


def settings(testbed, **over) -> Path:
    """A run config for real containers: tiny sweeps and evals, the serving mode proven here."""
    import yaml
    s = {"measure": {"workload": {"input_len": 128, "output_len": 32, "prefix_hit": 0.0},
                     "single_stream": {"input_len": 128, "output_len": 32, "prefix_hit": 0.0},
                     "duration_s": 6, "requests_per_point": 8, "start_rps": 2.0, "max_points": 2,
                     "bisect_steps": 0, "single_stream_requests": 1, "warmup": 2, "eval_items": 10,
                     "eval_tasks": ["qa"]},
         "gate": {"noise_floor": 0.15, "max_repeats": 1},
         "base_flags": {"--max-model-len": 4096, **testbed.serving_flags}, **over}
    path = Path(tempfile.mkdtemp(prefix="inferloop-docker-")) / "run.yaml"
    path.write_text(yaml.safe_dump(json.loads(json.dumps(s))))
    return path
