"""The run as a library: open a run from a RunConfig (its Target), a Sandbox and a Planner, and
drive the graph until it ends or waits on a review. `agent optimize`, `agent resume`, `agent
replay` and the GPU device script are thin callers of `start` / `resume` / `drive`.

The sandbox comes from the ground registry by the config's backend name (sandboxes.registry), so
this module never knows which ground it runs on; tests pass their own `sandbox_factory`, which
takes the same (cfg, card, hw) as a registered ground's opener.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from langgraph.types import Command
from pydantic import ValidationError

from agent import graph as graphmod
from agent import nodes, run_lock
from agent.config import RunConfig, gpus_per_trial, resolve_target
from agent.errors import BadInput
from agent.ledger import LEDGER, Ledger
from agent.records import FINAL
from agent.report import run_summary as summary
from agent.suite import default_suite
from agent.review import ask_on_terminal
from sandboxes import registry

SandboxFactory = Callable[[RunConfig, object, object], object]
Ask = Callable[[dict], "dict | None"]  # a pending patch -> {"status", "by", "reason"} or None (not now)


def default_sandbox(cfg: RunConfig, card, hw):
    """The run's ground, opened by name through the registry (the agent never imports a ground)."""
    return registry.open_sandbox(cfg.backend, cfg, card, hw, framework=cfg.framework)


def open_runtime(run_dir: Path, cfg: RunConfig, *, sandbox_factory: SandboxFactory | None = None,
                 suite_factory=None, planner=None, progress=None) -> nodes.Runtime:
    run_lock.acquire(run_dir)  # one process per run: RunBusy names the holder (agent/run_lock.py)
    card, hw = resolve_target(cfg.target)
    # A registered ground may narrow the planner and bring its own quality gate; a test's own
    # sandbox factory is no registered ground and gets neither.
    ground = registry.get(cfg.backend, cfg.framework) if sandbox_factory is None else None
    sandbox = (sandbox_factory or default_sandbox)(cfg, card, hw)
    # lm-eval, when asked for, scores the gate on any ground (as the old sandbox hook allowed)
    if suite_factory is None and ground is not None and ground.suite is not None and cfg.measure.harness != "lm-eval":
        suite = ground.suite(cfg, run_dir)
    else:
        suite = (suite_factory or default_suite)(cfg, card, hw, sandbox)
    ledger = Ledger(run_dir, create=True)
    if ledger.meta("ground") and hasattr(sandbox, "restore_ground"):  # a resumed run keeps its clock
        sandbox.restore_ground(ledger.meta("ground"))
    ledger.ground = getattr(sandbox, "ground_state", None)
    if planner is None and ledger.meta("replay"):  # a resumed replay keeps replaying its playbook (issue 5)
        from agent.playbooks.replay import planner_for_run
        planner = planner_for_run(run_dir)
    if planner is None:  # --planner builtin|llm|hybrid; LLM token use goes to the ledger's events
        from agent.planners.hybrid import make_planner
        scope = dict(ground.planner_scope or {}) if ground else {}
        split = gpus_per_trial(cfg, hw)
        if split:  # trials side by side on this host: each plans for its share of the devices
            scope["gpus"] = split
        if weights := getattr(sandbox, "weights", None):  # a real node serves its checkpoints' precisions only
            scope["weights"] = tuple(weights)
        planner = make_planner(cfg.planner, llm_model=cfg.llm_model, run_dir=run_dir, ledger=ledger,
                               progress=progress, scope=scope or None, **cfg.llm.model_dump())
    return nodes.Runtime(config=cfg, run_dir=run_dir, ledger=ledger, sandbox=sandbox,
                         planner=planner, suite=suite, card=card, hw=hw, progress=progress or (lambda s: None))


def load_config(run_dir: Path) -> RunConfig:
    if not (Path(run_dir) / LEDGER).is_file():
        raise BadInput(f"{str(run_dir)!r} is not a run directory (no {LEDGER}); `agent runs` lists runs")
    led = Ledger(run_dir)
    try:
        data = led.meta("config")
    finally:
        led.close()
    if data is None:  # killed between creating the ledger and recording the config: nothing ran
        raise BadInput(f"{str(run_dir)!r} was stopped before its configuration was recorded (nothing ran); "
                       "start it again with `agent optimize ... --run-dir` on the same directory")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as e:
        from agent.config import validation_message
        raise BadInput(f"{str(run_dir)!r}: the recorded configuration is not valid here: "
                       f"{validation_message(e)}") from None


def _recorded(run_dir: Path) -> bool:
    """Whether the run dir's ledger holds a configuration (a start killed before that ran nothing)."""
    led = Ledger(run_dir)
    try:
        return led.meta("config") is not None
    finally:
        led.close()


def new_run_dir(run_dir: Path) -> tuple[Path, bool]:
    """Refuse a directory that already holds a run (that is `agent resume`), else create it
    (agent/safe_input.py: a file, /proc, an unwritable place exit 2); also whether it was created."""
    from agent.safe_input import prepare_run_dir
    run_dir = Path(run_dir)
    if (run_dir / LEDGER).exists() and _recorded(run_dir):
        raise BadInput(f"{str(run_dir)!r} already holds a run; use `agent resume {run_dir}`")
    return run_dir, prepare_run_dir(run_dir)


def record_start(rt: nodes.Runtime) -> None:
    rt.ledger.set_meta("config", rt.config.model_dump(mode="json"))
    rt.ledger.set_meta("created", time.time())


@run_lock.locked(1)
def start(cfg: RunConfig, run_dir: Path, *, ask: Ask | None = None, **kw) -> dict:
    """A new run: record the config, then drive the graph."""
    cfg.check()
    run_dir, created = new_run_dir(run_dir)
    try:
        rt = open_runtime(run_dir, cfg, **kw)
    except BadInput:  # refused before it started (no framework, bad model path): leave nothing behind
        _forget(run_dir, created)
        raise
    record_start(rt)
    for n in cfg.notes:  # what check() chose for the user, e.g. a workload that fits the model
        rt.ledger.event("config", n)
        rt.progress(f"note: {n}")
    if parallel(cfg):
        try:
            return _drive_parallel(rt, ask)
        except BadInput:  # the cluster refused the run (no node offers the resource, too few GPUs)
            if not rt.ledger.trials():  # before any trial: the same command runs again once it is fixed
                rt.ledger.close()
                _forget(run_dir, created)
            raise
    return drive(rt, {"trial": None}, ask=ask)


def _forget(run_dir: Path, created: bool) -> None:
    """A run refused before its first trial leaves no directory it made."""
    if created:
        run_lock.release(run_dir)
        import shutil
        shutil.rmtree(run_dir, ignore_errors=True)


def parallel(cfg: RunConfig) -> bool:
    """Several trials at once on Ray (agent/cluster.py); Ray is imported only then."""
    return cfg.workers > 1 or cfg.cluster is not None


def _drive_parallel(rt: nodes.Runtime, ask: Ask | None) -> dict:
    from agent import cluster
    return cluster.drive(rt, ask=ask)


@run_lock.locked(0)
def resume(run_dir: Path, *, approve: str | None = None, cluster: str | None = None, ask: Ask | None = None,
           **kw) -> dict:
    """Continue a run from its last checkpoint, with the config it was started with (`approve`, and
    for a run of several workers `cluster`, replace theirs)."""
    cfg = load_config(run_dir)
    if approve is not None:
        cfg = cfg.model_copy(update={"approve": approve}).check()
    if cluster is not None:
        if not parallel(cfg):
            raise BadInput(f"--ray {cluster!r}: this run was started with one worker and goes on in this process; "
                           "--ray applies to runs of several workers")
        from agent.cluster import check_reachable
        check_reachable(cluster)  # before the run's config takes it
        cfg = cfg.model_copy(update={"cluster": cluster}).check()
    rt = open_runtime(Path(run_dir), cfg, **kw)
    rt.ledger.set_meta("config", cfg.model_dump(mode="json"))
    killed = nodes.reap_stale_servers(rt.run_dir)  # servers a killed agent left running
    if killed:
        rt.ledger.event("reap", f"stopped server process groups left by a killed run: {killed}")
        rt.progress(f"stopped {len(killed)} server(s) left running by the interrupted run")
    if parallel(cfg):
        if rt.ledger.meta("status") == "done":
            return summary(rt, "done")
        return _drive_parallel(rt, ask)
    g = graphmod.build(rt)
    snap = g.get_state(graphmod.THREAD)
    if not snap.next and rt.ledger.status() == "done":
        return summary(rt, "done")
    inp = Command(resume=True) if any(t.interrupts for t in snap.tasks) else None
    if not snap.values:  # no checkpoint (deleted, or unreadable and moved aside): rebuild from the ledger
        inp = {"trial": None}  # the nodes read the incumbent from the ledger
    return drive(rt, inp, graph=g, ask=ask)


def drive(rt: nodes.Runtime, inp, *, graph=None, ask: Ask | None = None) -> dict:
    """Run the graph until it ends or waits on a review nobody can answer now. `ask` answers a
    pending patch; without it a human is asked when the policy is `ask` and stdin is a terminal."""
    g = graph or graphmod.build(rt)
    if rt.ledger.status() not in FINAL:  # a new run, a resumed one (interrupted, waiting, killed)
        rt.ledger.set_status("running")
    while True:
        g.invoke(inp, graphmod.THREAD)
        snap = g.get_state(graphmod.THREAD)
        waiting = [i for t in snap.tasks for i in t.interrupts]
        if not waiting:
            return summary(rt, rt.ledger.status() or "done")
        pid = waiting[0].value["patch_id"]
        p = rt.ledger.patch(pid)
        if p["status"] == "pending":
            answer = ask(p) if ask is not None else ask_on_terminal(rt.config.approve, p)
            if answer is None:
                rt.ledger.set_status("waiting_for_review")
                out = summary(rt, "waiting_for_review")
                out["waiting"] = {"patch": pid, "how": [f"agent approvals {rt.run_dir}",
                                                         f"agent approve {rt.run_dir} {pid}",
                                                         f"agent reject {rt.run_dir} {pid} --reason '...'",
                                                         f"agent resume {rt.run_dir}"]}
                rt.progress(f"waiting for review of patch {pid}: " + "; ".join(out["waiting"]["how"][1:]))
                return out
            rt.ledger.decide_patch(pid, answer["status"], by=answer["by"], reason=answer.get("reason", ""))
        rt.ledger.set_status("running")
        inp = Command(resume=True)
