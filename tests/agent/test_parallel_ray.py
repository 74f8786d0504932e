"""Trials at once on a local Ray cluster the tests start (2 CPUs, sim nodes): verdicts that do not
depend on which worker finished first, one ledger writer, a lost worker, Ctrl-C with trials in
flight and the resume after it. Nothing here waits on time: the gate (tests/agent/ray_gate.py)
answers when a server has checked in, and the test acts on that."""
from __future__ import annotations

import os
import signal
import threading

import pytest

ray = pytest.importorskip("ray", reason="the cluster extra is not installed: pip install -e '.[cluster]'")

from agent import cluster  # noqa: E402
from agent import run as runlib  # noqa: E402
from agent.ledger import Ledger  # noqa: E402
from agent.worker import InlineExecutor  # noqa: E402
from agent.config import Budget  # noqa: E402
from tests.agent.conftest import small_config  # noqa: E402


ray_gate = None


@pytest.fixture(scope="module")
def local_cluster():
    """The cluster, and the gated ground registered for this module only (imported here, not at
    collection, and unregistered after: other tests see the built-in grounds alone)."""
    global ray_gate
    from sandboxes import registry
    from tests.agent import ray_gate as gate_module
    ray_gate = gate_module
    registry.register(gate_module.GROUND)
    ray.init(num_cpus=2, resources={cluster.RESOURCE: 2}, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    registry._GROUNDS.pop(("sim-gated", None), None)


@pytest.fixture
def gate(local_cluster):
    made = []

    def make(holds: dict[int, int]):
        g = ray_gate.Gate.options(name=ray_gate.NAME).remote(holds)
        made.append(g)
        return g
    yield make
    for g in made:
        ray.kill(g)


def open_run(tmp_path, name="run", backend="sim-gated", trials=4, workers=2):
    rd = tmp_path / name
    rd.mkdir()
    cfg = small_config(backend=backend, budget=Budget(trials=trials), workers=workers)
    rt = runlib.open_runtime(rd, cfg)
    runlib.record_start(rt)
    return rt


def close(rt):
    rt.ledger.close()
    runlib.run_lock.release(rt.run_dir)


def verdicts(led: Ledger) -> list[tuple]:
    return [(t["id"], t["phase"], t["description"], t["verdict"], t["reason"]) for t in led.trials()]


def test_ray_and_in_process_runs_reach_the_same_verdicts(tmp_path, gate):
    """Two sim nodes racing on Ray against the in-process executor, which finishes tasks strictly in
    order: the same trials, verdicts, reasons and ground clock, so finish order does not matter."""
    gate({})
    a = open_run(tmp_path, "ray", trials=6)
    out = cluster.drive(a, executor=cluster.RayExecutor(2))
    b = open_run(tmp_path, "inline", trials=6)
    cluster.drive(b, executor=InlineExecutor())
    assert out["status"] == "done" and len(a.ledger.trials()) == 6
    assert verdicts(a.ledger) == verdicts(b.ledger)
    assert a.ledger.meta("curve") == b.ledger.meta("curve")
    # trials ran side by side: the ground clock is less than the sum of what was measured
    work = sum(m["ground_s"] for t in a.ledger.trials() for m in a.ledger.measurements(t["id"]))
    assert a.ledger.meta("parallel")["now"] < work
    close(a), close(b)


def test_workers_never_open_the_ledger(tmp_path, gate):
    g = gate({})
    rt = open_run(tmp_path)
    cluster.drive(rt, executor=cluster.RayExecutor(2))
    rep = ray.get(g.report.remote())
    pids = {p for ps in rep["arrivals"].values() for p in ps}
    assert pids and os.getpid() not in pids  # the servers were measured in worker processes
    assert rep["ledger_fds"] == []  # ... none of which had the ledger open
    n = sum(len(rt.ledger.measurements(t["id"])) for t in rt.ledger.trials())
    assert n == sum(len(ps) for ps in rep["arrivals"].values())  # every server's measurement came back
    close(rt)


def pid_of(g, box, tid: int, n: int) -> int:
    """The worker pid serving trial tid's n-th server; fails (with the driver's error) if the driver
    ended before that server checked in."""
    ref = g.pid.remote(tid, n)
    ready, _ = ray.wait([ref], timeout=300)
    assert ready, f"trial {tid}'s server {n} never reached the gate; driver: {box}"
    return ray.get(ref)


def _drive_in_thread(tmp_path, **kw):
    """The driver in a thread of its own (it opens its runtime there: sqlite connections stay in the
    thread that made them), so the test can act on the workers meanwhile."""
    box: dict = {}

    def go():
        rt = open_run(tmp_path)
        try:
            box["out"] = cluster.drive(rt, executor=cluster.RayExecutor(2, **kw))
        except BaseException as e:  # noqa: BLE001  re-raised by the test
            box["error"] = e
        finally:
            close(rt)
    th = threading.Thread(target=go)
    th.start()
    return th, box


def test_a_lost_worker_is_retried_and_the_run_goes_on(tmp_path, gate):
    g = gate({2: 1})  # trial 2's first server waits at the gate
    th, box = _drive_in_thread(tmp_path)
    pid = pid_of(g, box, 2, 1)
    os.kill(pid, signal.SIGKILL)  # the worker process serving trial 2, mid-trial
    th.join(600)
    assert "error" not in box and box["out"]["status"] == "done"
    led = Ledger(tmp_path / "run")
    assert any("trial 2: worker lost" in e["message"] and "WorkerCrashedError" in e["message"]
               for e in led.events())
    assert led.trial(2)["verdict"] in ("kept", "reverted") and len(led.measurements(2, "candidate")) == 1
    assert ray.get(g.report.remote())["arrivals"][2][1] != pid  # measured again on a new worker


def test_a_trial_whose_worker_is_lost_twice_fails_with_the_reason(tmp_path, gate):
    g = gate({2: 2})
    th, box = _drive_in_thread(tmp_path)
    for n in (1, 2):
        os.kill(pid_of(g, box, 2, n), signal.SIGKILL)
    th.join(600)
    assert "error" not in box and box["out"]["status"] == "done"
    led = Ledger(tmp_path / "run")
    t = led.trial(2)
    assert t["verdict"] == "failed" and t["reason"].startswith("worker lost 2 times: WorkerCrashedError")
    assert led.trial(3)["verdict"] in ("kept", "reverted")  # the others went on


class InterruptWhenOnlyHeld(cluster.RayExecutor):
    """Ctrl-C at a known point: once every task but the held trial's has come back and the held
    trial's server is up (checked in at the gate)."""

    def __init__(self, held: int, gate, *a, **kw):
        super().__init__(*a, **kw)
        self.held, self.gate, self.refs = held, gate, {}

    def submit(self, task):
        ref = super().submit(task)
        self.refs[ref] = task.trial_id
        return ref

    def wait(self, handles):
        if [self.refs[h] for h in handles] == [self.held]:
            ray.get(self.gate.pid.remote(self.held, 1))
            raise KeyboardInterrupt
        return super().wait(handles)


def test_ctrl_c_stops_the_trials_in_flight_and_resume_keeps_what_finished(tmp_path, gate):
    g = gate({2: 1})  # trial 2 never gets past the gate in the first run
    rt = open_run(tmp_path, trials=5)
    with pytest.raises(KeyboardInterrupt):
        cluster.drive(rt, executor=InterruptWhenOnlyHeld(2, g, 2, grace_s=120))
    led = rt.ledger
    assert led.trial(2)["status"] == "running" and not led.measurements(2)
    # the baseline's measurement came back, and waited for trial 2's (the sim's clock is modeled:
    # results are handled in ground-time order); Ctrl-C recorded it
    assert led.trial(1)["status"] == "running" and len(led.measurements(1, "candidate")) == 1
    rep, stopped = ray.get(g.report.remote()), ray_gate.stops(rt.run_dir)
    assert stopped.get(2) == 1  # the cancelled trial's server was stopped, not left behind
    assert all(stopped.get(t, 0) == len(a) for t, a in rep["arrivals"].items())
    close(rt)

    rt2 = runlib.open_runtime(rt.run_dir, runlib.load_config(rt.run_dir))
    out = cluster.drive(rt2, executor=cluster.RayExecutor(2))
    assert out["status"] == "done"
    rep = ray.get(g.report.remote())
    assert len(rep["arrivals"][2]) == 2  # submitted again ...
    assert len(rep["arrivals"][1]) == 1  # ... while trial 1's finished measurement was kept, not redone
    assert len(rt2.ledger.measurements(1, "candidate")) == 1
    assert all(t["status"] == "done" for t in rt2.ledger.trials()) and len(rt2.ledger.trials()) == 5
    close(rt2)
