"""A sim ground whose servers check in at a gate (a Ray actor) before they are measured, for the
cluster tests: the test learns which worker process serves which trial (to kill it), holds a
trial's server until it says so; each server's exit leaves a line in its work dir (`stops`). No timing: the gate's methods wait
on asyncio events, the test on the gate's answers.

The tests register it as the backend `sim-gated` for their module only; agent/parallel.py passes this
module to the workers (the ground's `open.__module__`), where importing it registers it.
"""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

import ray

from sandboxes import registry
from sandboxes.sim import SimSandbox

NAME = "inferloop-test-gate"


@ray.remote(num_cpus=0)
class Gate:
    def __init__(self, holds: dict[int, int]):
        self.holds = holds  # trial -> how many of its first server arrivals wait for release()
        self.arrivals: dict[int, list[int]] = {}  # trial -> the worker pid of each arrival
        self.ledger_fds: list[str] = []
        self.events: dict = {}

    def _ev(self, *key) -> asyncio.Event:
        return self.events.setdefault(key, asyncio.Event())

    async def arrive(self, tid: int, pid: int, ledger_fds: list[str]) -> None:
        self.arrivals.setdefault(tid, []).append(pid)
        self.ledger_fds += ledger_fds
        n = len(self.arrivals[tid])
        self._ev("arrived", tid, n).set()
        if n <= self.holds.get(tid, 0):
            await self._ev("release", tid, n).wait()

    async def pid(self, tid: int, n: int = 1) -> int:
        """The pid of the worker serving trial `tid`'s n-th server, once it has arrived."""
        await self._ev("arrived", tid, n).wait()
        return self.arrivals[tid][n - 1]

    def release(self, tid: int, n: int = 1) -> None:
        self._ev("release", tid, n).set()

    def report(self) -> dict:
        return {"arrivals": self.arrivals, "ledger_fds": self.ledger_fds}


def stops(run_dir: Path) -> dict[int, int]:
    """Trial -> how many of its servers were stopped (each server's exit writes a line)."""
    out = {}
    for f in Path(run_dir).glob("nodes/trial-*/servers-stopped"):
        out[int(f.parent.name.split("-")[-1])] = len(f.read_text().split())
    return out


def _ledger_fds() -> list[str]:
    """Files named like the run's ledger that this process holds open (a worker must hold none)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "ledger.sqlite" in target:
            out.append(target)
    return out


class _Server:
    def __init__(self, inner, tid: int, work: Path):
        self.inner, self.tid, self.work = inner, tid, work
        self.client, self.log_path = inner.client, inner.log_path

    def __enter__(self):
        return self

    def log_text(self) -> str:  # the first thing a worker does with a server: check in here
        ray.get(ray.get_actor(NAME).arrive.remote(self.tid, os.getpid(), _ledger_fds()))
        return self.inner.log_text()

    def __exit__(self, *exc) -> None:
        # A file, not an actor call: a cancelled task's remote calls may be refused while it unwinds.
        with open(self.work / "servers-stopped", "a") as f:
            f.write(f"{os.getpid()}\n")
        self.inner.stop()


class GatedSim(SimSandbox):
    def launch(self, candidate, run_dir):
        server = super().launch(candidate, run_dir)
        return _Server(server, int(Path(run_dir).name.split("-")[-1]), Path(run_dir))


def open_gated(cfg, card, hw):
    return GatedSim(cfg.target.model, cfg.target.hw, seed=cfg.seed)


GROUND = registry.Ground("sim-gated", open_gated, help="the sim, with a test gate at each server", modeled_clock=True)
if ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE:
    registry.register(GROUND)  # in a Ray worker (the driver passes this module); the tests register it themselves
