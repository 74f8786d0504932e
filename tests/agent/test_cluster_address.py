"""A Ray address nothing answers on is refused at once with exit 2, naming it, leaving no run
directory (Ray's own join retried the head for 13 min 44 s); `agent resume --ray` moves a run of
several workers to another head, and a one-worker run says it takes none. A run the cluster refuses
before its first trial leaves no run directory behind."""
from __future__ import annotations

import socket

import pytest

from agent import run as runlib
from agent.cluster import check_reachable
from agent.errors import BadInput
from agent.ledger import Ledger
from tests.agent.conftest import small_config

OPT = ["optimize", "--model", "glm-5.2", "--hw", "mi355x", "--budget", "1"]


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_an_address_nothing_answers_on_is_refused_naming_it():
    where = f"127.0.0.1:{closed_port()}"
    with pytest.raises(BadInput, match=f"'{where}'.*nothing answers there"):
        check_reachable(where)


@pytest.mark.parametrize("where", [":", "10.0.0.1", "10.0.0.1:99999", "10.0.0.1:0", ":6379", "head:port"])
def test_a_malformed_address_is_refused_saying_what_is_allowed(where):
    with pytest.raises(BadInput, match="allowed: HOST:PORT"):
        check_reachable(where)


def test_a_listening_head_passes_and_rays_other_forms_are_left_to_it():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_reachable(f"127.0.0.1:{s.getsockname()[1]}")
    for where in ("auto", f"ray://127.0.0.1:{closed_port()}"):  # no probe: Ray reads these itself
        check_reachable(where)


def test_optimize_refuses_an_unreachable_cluster_leaving_no_run_dir(agent, tmp_path):
    pytest.importorskip("ray", reason="the cluster extra is not installed: pip install -e '.[cluster]'")
    where = f"127.0.0.1:{closed_port()}"
    r = agent(*OPT, "--workers", "2", "--ray", where, "--run-dir", str(tmp_path / "r"))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert where in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "r").exists()


def test_resume_takes_another_head_only_for_runs_of_several_workers(agent, tmp_path):
    pytest.importorskip("ray", reason="the cluster extra is not installed: pip install -e '.[cluster]'")
    one, two = tmp_path / "one", tmp_path / "two"
    for rd, workers in ((one, 1), (two, 2)):
        rd.mkdir()
        rt = runlib.open_runtime(rd, small_config(workers=workers, cluster="10.0.0.1:6379" if workers > 1 else None))
        runlib.record_start(rt)
        rt.ledger.close()
    r = agent("resume", str(one), "--ray", "10.0.0.2:6379")
    assert r.returncode == 2 and "started with one worker" in r.stderr, r.stderr
    where = f"127.0.0.1:{closed_port()}"
    r = agent("resume", str(two), "--ray", where)
    assert r.returncode == 2 and where in r.stderr and "Traceback" not in r.stderr, r.stderr
    led = Ledger(two)
    assert led.meta("config")["cluster"] == "10.0.0.1:6379"  # a refused head does not replace the run's own
    led.close()


def test_a_run_the_cluster_refuses_before_its_first_trial_leaves_no_directory(tmp_path):
    ray = pytest.importorskip("ray", reason="the cluster extra is not installed: pip install -e '.[cluster]'")
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)  # no node offers inferloop_node
    try:
        with pytest.raises(BadInput, match="no node offering the resource"):
            runlib.start(small_config(workers=2), tmp_path / "r")
    finally:
        ray.shutdown()
    assert not (tmp_path / "r").exists()  # the same command runs again once the nodes offer it
