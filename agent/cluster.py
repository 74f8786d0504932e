"""Trials as Ray tasks: one per node of a Ray cluster, or one per sim node of a local Ray instance.

Imported only when a run asks for it (`--workers N` above 1, `--ray ADDRESS`, RAY_ADDRESS): the
default one-node loop never loads Ray. Each task asks for one unit of the custom resource
`inferloop_node`, so two trials never share a node's accelerators: a cluster's nodes are started
with `ray start ... --resources '{"inferloop_node": 1}'`; a local instance gets N units (N sim
nodes, no accelerators to share). Ray does not retry a task by itself (max_retries=0): a lost
worker is the driver's to record, retry once, or fail with the reason (agent/parallel.py).
"""
from __future__ import annotations

import os
import socket

from agent.config import gpus_per_trial
from agent.errors import BadInput
from agent.parallel import Driver
from agent.worker import Lost, Task, run as run_task

RESOURCE = "inferloop_node"
CANCEL_GRACE_S = 60.0  # how long a cancelled task gets to stop its server before it is killed
CONNECT_S = 10.0  # how long the head of a --ray cluster gets to answer before the run is refused


def address(cfg_cluster: str | None) -> str | None:
    """The cluster to join: --ray, else RAY_ADDRESS; None: start a local instance."""
    return cfg_cluster or os.environ.get("RAY_ADDRESS") or None


def check_reachable(where: str, timeout_s: float = CONNECT_S) -> None:
    """A HOST:PORT that nothing answers on is refused at once: Ray's own join retries the head's
    GCS, printing its warnings, and gave up only after 13 min 44 s (Ray 2.60, a name that does not
    resolve and a closed port alike). A malformed one is refused too; Ray's other forms (auto,
    local, ray://HOST:PORT) are left to it."""
    if "://" in where or where in ("auto", "local"):
        return
    host, sep, port = where.rpartition(":")
    if not (sep and host.strip("[]") and port.isdigit() and 0 < int(port) < 65536):
        raise BadInput(f"Ray address {where!r} (--ray or RAY_ADDRESS): allowed: HOST:PORT (the head node's, port "
                       f"6379 by default), ray://HOST:PORT, auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise BadInput(f"Ray address {where!r} (--ray or RAY_ADDRESS): nothing answers there ({e}); it is the head "
                       f"node's HOST:PORT, as `ray start --head` prints it (port 6379 by default)") from None


class RayExecutor:
    """`gpus` > 0: the trials share this host's accelerators, each task asks Ray for that many GPUs
    and Ray hands it disjoint ones (its CUDA_VISIBLE_DEVICES, or HIP/ROCR_VISIBLE_DEVICES on AMD, in
    the task's process, which the server inherits: tools/server_env.py keeps them). `num_gpus`: what
    a local instance offers (None: what Ray detects); `fn`: the task's function (a test's probe)."""

    def __init__(self, workers: int, cluster: str | None = None, *, num_cpus: int | None = None,
                 grace_s: float = CANCEL_GRACE_S, gpus: int = 0, num_gpus: int | None = None, fn=run_task):
        import ray
        self.ray, self.grace_s = ray, grace_s
        where = address(cluster)
        self.owned = not ray.is_initialized()
        if self.owned:
            if where:
                check_reachable(where)
                try:
                    ray.init(address=where, include_dashboard=False, log_to_driver=False)
                except (ConnectionError, RuntimeError, ValueError) as e:
                    raise BadInput(f"--ray {where!r}: cannot join that Ray cluster ({e})") from None
            else:  # N sim nodes on this host; the sim's tasks are light, they share its CPUs
                ray.init(num_cpus=num_cpus or min(workers, os.cpu_count() or 1), resources={RESOURCE: workers},
                         num_gpus=num_gpus, include_dashboard=False, log_to_driver=False)
        have = ray.cluster_resources().get(RESOURCE, 0)
        if have < 1:
            if self.owned:
                ray.shutdown()
            raise BadInput(f"the Ray cluster at {where!r} has no node offering the resource {RESOURCE!r}; start "
                           f"each node with: ray start --address=... --resources='{{\"{RESOURCE}\": 1}}'")
        self.nodes = int(have)
        if gpus:
            found = int(ray.cluster_resources().get("GPU", 0))
            if found < gpus:
                if self.owned:
                    ray.shutdown()
                raise BadInput(f"--workers {workers}: each trial needs {gpus} GPU(s) and Ray finds {found} on this host")
            self.nodes = min(self.nodes, found // gpus)
        self._run = ray.remote(fn).options(resources={RESOURCE: 1}, num_cpus=0, num_gpus=gpus, max_retries=0)

    def submit(self, task: Task):
        return self._run.remote(task)

    def wait(self, handles: list):
        ray = self.ray
        done, _ = ray.wait(handles, num_returns=1)
        ref = done[0]
        try:
            return ref, ray.get(ref)
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError,
                ray.exceptions.TaskCancelledError, ray.exceptions.LocalRayletDiedError) as e:
            return ref, Lost(f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
        except ray.exceptions.RayTaskError as e:  # the task's own code raised past its guard
            return ref, Lost(f"task error: {str(e).splitlines()[0][:300]}")

    def cancel(self, handles: list) -> None:
        """Ask each task to stop (KeyboardInterrupt in it: its server's context manager stops the
        server), wait for them to end, then kill what is left."""
        ray = self.ray
        if not handles:
            return
        for h in handles:
            ray.cancel(h, force=False)
        _, left = ray.wait(handles, num_returns=len(handles), timeout=self.grace_s)
        for h in left:
            ray.cancel(h, force=True)

    def close(self) -> None:
        if self.owned:
            self.ray.shutdown()


def drive(rt, *, ask=None, executor=None, ground_module: str | None = None) -> dict:
    """Run (or go on with) a run whose config asks for several workers; agent.report.run_summary's dict."""
    from agent.report import run_summary
    ex = executor or RayExecutor(rt.config.workers, rt.config.cluster, gpus=gpus_per_trial(rt.config, rt.hw))
    try:
        workers = rt.config.workers if executor is not None else min(rt.config.workers, ex.nodes)
        if workers < rt.config.workers:
            rt.progress(f"note: the cluster has room for {workers} trial(s) at once ({RESOURCE} nodes, GPUs); "
                        f"running {workers}")
        out = Driver(rt, ex, workers, ask=ask, ground_module=ground_module).run()
    finally:
        if executor is None:
            ex.close()
    if "waiting" in out:
        res = run_summary(rt, "waiting_for_review")
        pid = out["waiting"]
        res["waiting"] = {"patch": pid, "how": [f"agent approvals {rt.run_dir}", f"agent approve {rt.run_dir} {pid}",
                                                f"agent reject {rt.run_dir} {pid} --reason '...'",
                                                f"agent resume {rt.run_dir}"]}
        rt.progress(f"waiting for review of patch {pid}: " + "; ".join(res["waiting"]["how"][1:]))
        return res
    return run_summary(rt, rt.ledger.meta("status") or "done")
