"""Process handling with real processes and real HTTP on loopback: ready, death, timeout,
port clashes, Ctrl-C, and a server killed mid-benchmark."""
import _thread
import asyncio
import os
import signal
import socket
import sys
import threading
import time

import httpx
import pytest

from tools.bench.metrics import summarize
from tools.bench.records import RequestSpec
from tools.protocols import LaunchFailure
from tools.server import ProcessHandle, launch_process, wait_ready
from toolhelpers import group_members, mock_argv, pid_alive

READY = "Application startup complete."


def test_ready_line_then_stop_kills_the_group(tmp_path):
    with launch_process(mock_argv(), run_dir=tmp_path, model="m", ready_line=READY, timeout_s=30) as s:
        assert httpx.get(s.url + "/health").status_code == 200
        pid = s.handle.proc.pid
        assert s.alive() and READY in s.log_text()
        assert "tools.bench.mock_server" in (tmp_path / "launch.txt").read_text()
    assert not pid_alive(pid) and group_members(pid) == []
    assert s.log_path.exists() and s.log_path.parent == tmp_path


def test_health_endpoint_alone_is_enough(tmp_path):
    with launch_process(mock_argv("--ready-line", "something else"), run_dir=tmp_path, model="m",
                        ready_line="never printed", health_path="/health", timeout_s=30) as s:
        assert s.alive()


def test_never_ready_times_out_kills_group_and_quotes_log(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(LaunchFailure) as e:
        launch_process(mock_argv("--mode", "never_ready", "--log-line", "INFO still warming up"),
                       run_dir=tmp_path, model="m", ready_line=READY, timeout_s=2)
    assert time.monotonic() - t0 < 15
    f = e.value
    assert "not ready after 2 s" in str(f) and "process group killed" in str(f)
    assert "INFO still warming up" in str(f) and "INFO still warming up" in f.excerpt
    assert f.diagnosis.kind == "not_ready"
    pid = int(f.log_path.read_text().split("pid ")[1].split(")")[0])
    assert not pid_alive(pid)


def test_never_ready_and_silent_says_it_wrote_nothing(tmp_path):
    with pytest.raises(LaunchFailure) as e:
        launch_process(lambda port: [sys.executable, "-c", "import time; time.sleep(60)"], run_dir=tmp_path, model="m",
                       ready_line=READY, timeout_s=1)
    assert str(e.value).endswith("process group killed; it wrote nothing to its log in that time"), str(e.value)


def test_death_fails_fast_with_diagnosis(tmp_path):
    line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    t0 = time.monotonic()
    with pytest.raises(LaunchFailure) as e:
        launch_process(mock_argv("--mode", "die", "--log-line", line), run_dir=tmp_path, model="m",
                       ready_line=READY, timeout_s=120)
    assert time.monotonic() - t0 < 20  # did not wait for the timeout
    assert e.value.diagnosis.kind == "oom" and e.value.diagnosis.details == {"tried": "2.00 GiB"}
    assert line in e.value.excerpt and "exited with code 1" in str(e.value)


def test_death_without_known_signature_is_engine_dead(tmp_path):
    with pytest.raises(LaunchFailure) as e:
        launch_process(mock_argv("--mode", "die", "--log-line", "something odd happened"), run_dir=tmp_path,
                       model="m", ready_line=READY, timeout_s=60)
    assert e.value.diagnosis.kind == "engine_dead" and "something odd happened" in e.value.excerpt


def test_port_in_use_gets_another_port(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        with launch_process(mock_argv(), run_dir=tmp_path, model="m", ready_line=READY, port=taken,
                            timeout_s=30) as s:
            port = int(s.url.rsplit(":", 1)[1])
            assert port != taken
            assert httpx.get(s.url + "/v1/models").json()["data"][0]["id"] == "m"


def test_port_grabbed_after_the_check_is_retried(tmp_path):
    # The first argv ignores the port it is given and binds one that is taken: the launch dies
    # with "address already in use" and is retried on a fresh port.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        calls = []

        def argv(port):
            calls.append(port)
            return mock_argv()(taken if len(calls) == 1 else port)
        with launch_process(argv, run_dir=tmp_path, model="m", ready_line=READY, timeout_s=30) as s:
            assert len(calls) == 2 and s.url.endswith(str(calls[1]))


def test_ctrl_c_while_waiting_kills_the_group(tmp_path):
    # A test run started in the background inherits SIGINT ignored, and then interrupt_main does
    # nothing: give Ctrl-C Python's own handler for this test, as an interactive run has.
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    h = ProcessHandle(mock_argv("--mode", "never_ready")(0), log_path=tmp_path / "x.log")
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            wait_ready(h, url="http://127.0.0.1:1", ready_line=READY, health_path=None, timeout_s=60)
    finally:
        signal.signal(signal.SIGINT, before)
    assert not pid_alive(h.proc.pid) and group_members(h.pgid) == []


def test_server_killed_mid_benchmark_counts_failures_and_leaves_no_orphan(tmp_path):
    s = launch_process(mock_argv("--mode", "die_after", "--die-after-s", "1.0", "--itl-s", "0.02"),
                       run_dir=tmp_path, model="m", ready_line=READY, timeout_s=30)
    pid = s.handle.proc.pid
    try:
        specs = [RequestSpec(id=i, input_tokens=4, output_tokens=200, arrival_s=0.1 * i, prompt="hi")
                 for i in range(20)]
        recs = asyncio.run(s.client.run(specs))
    finally:
        s.stop()
    p = summarize(recs)
    assert len(recs) == 20 and 0 <= p.success < 1.0
    assert all(r.error for r in recs if not r.ok)
    assert not pid_alive(pid) and group_members(pid) == []
