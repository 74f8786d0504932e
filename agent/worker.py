"""One unit of a trial's work, run where the sandbox is: on a worker of the cluster, or in process.

A `Task` is plain, picklable data (the run's config as JSON, the candidate, the approved patches'
diffs, the incumbent's measurements for the in-session eval decision): the worker opens its own
sandbox from it by the ground's registered name (sandboxes.registry), does the work and returns
plain JSON. It never touches the ledger: the driver is its only writer (agent/parallel.py).

Each task opens a fresh sandbox seeded by (run seed, trial, step), so what a measurement reads
does not depend on which node ran it or what that node ran before; its ground time is the
sandbox's own clock (the sim's simulated seconds; a real host's elapsed seconds). An `Executor`
runs tasks where the nodes are (agent/cluster.py: Ray); `InlineExecutor` runs them in this process.
"""
from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

FIRST, REPEAT, EVALUATE = "first", "repeat", "evaluate"


@dataclass
class Task:
    trial_id: int
    step: int  # 0: the first measurement; 1, 2, ...: follow-ups (repeats, evals) in the order decided
    need: str  # first | repeat | evaluate
    kind: str  # the trial's kind (config | patch | moe_tune)
    config: dict  # RunConfig JSON
    candidate: dict  # Candidate JSON
    work_dir: str  # the worker's run dir for this task (logs, source tree, tuned configs)
    patches: list = field(default_factory=list)  # [(patch id, diff, fix)] the candidate carries, approved
    incumbent: dict | None = None  # Candidate JSON of the incumbent (repeats measure it too)
    incumbent_id: int | None = None  # ... its trial (the driver tags incumbent-side rows with it)
    side: str | None = None  # a repeat's one side on a node of its own (incumbent | candidate); None: both
    nth: int = 0  # ... and which measurement of that role it is
    incumbent_patches: list = field(default_factory=list)
    incumbent_data: list = field(default_factory=list)  # its candidate measurements (the eval decision)
    rows: list = field(default_factory=list)  # the trial's measurements so far: (role, data, wall_s, ground_s)
    ground_module: str | None = None  # a module that registers a ground outside the built-ins


def _open(task: Task):
    from agent.config import RunConfig, resolve_target
    from sandboxes import registry
    if task.ground_module:
        importlib.import_module(task.ground_module)
    cfg = RunConfig.model_validate(task.config)
    card, hw = resolve_target(cfg.target)
    # The sandbox's own seed differs per task (launch noise); bench and eval seeds stay the run's.
    node_cfg = cfg.model_copy(update={"seed": cfg.seed * 1_000_003 + task.trial_id * 101 + task.step})
    sandbox = registry.open_sandbox(cfg.backend, node_cfg, card, hw, framework=cfg.framework)
    return cfg, card, hw, sandbox


def _suite(cfg, card, hw, sandbox, work: Path):
    from agent.suite import default_suite
    from sandboxes import registry
    ground = registry.get(cfg.backend, cfg.framework)
    if ground.suite is not None and cfg.measure.harness != "lm-eval":
        return ground.suite(cfg, work)
    return default_suite(cfg, card, hw, sandbox)


def _sync(sandbox, c, patches: dict, work: Path) -> None:
    """The worker's own source tree carries exactly c's patches (approved on the driver)."""
    from tools import patch as patchtool
    if not c.patches and not (work / "src" / c.framework).exists():
        return
    wanted = [(pid, *patches[pid]) for pid in c.patches]
    patchtool.sync(sandbox.source_tree(c.framework, work), wanted)


def run(task: Task) -> dict:
    """Do the task with run_trial's own steps (agent/trial.py) into a MemoryRecorder seeded with what
    the ledger holds; returns what is new: {"rows", "outcome", "diagnoses", "log_excerpt", "events",
    "result" (how the trial ended, when this step ended it), "candidate" (a tuned MoE trial's),
    "evals_row" (an evaluate step's first candidate row), "ground_s", "wall_s", "pid"}."""
    from agent import trial as tr
    from agent.records import Result
    from tools import frameworks, moe
    from tools.bench.refusal import RequestsRefused
    from tools.candidate import Candidate
    from tools.protocols import LaunchFailure

    work = Path(task.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    cfg, card, hw, sb = _open(task)
    version = getattr(sb, "version", None)
    patches = {pid: (diff, fix) for pid, diff, fix in [*task.patches, *task.incumbent_patches]}
    env = tr.TrialEnv(sandbox=sb, run_dir=work, config=cfg, hw=hw, suite=_suite(cfg, card, hw, sb, work),
                      adapter=lambda fw: frameworks.get(fw, version(fw) if version else None),
                      prepare=lambda c: _sync(sb, c, patches, work))
    rec = tr.MemoryRecorder(incumbent=list(task.incumbent_data), rows=[tuple(r) for r in task.rows])
    held = len(rec.rows)
    c = Candidate.model_validate(task.candidate)
    out: dict = {"pid": os.getpid()}
    t0, g0 = time.time(), sb.elapsed_s()
    result = None
    try:
        if task.kind == "moe_tune" and not c.moe_configs and task.need == FIRST:
            c = moe.install(c, moe.tune(sb, c, work, f"trial-{task.trial_id}"), env.adapter(c.framework))
            out["candidate"] = c.model_dump(mode="json")
        env.adapter(c.framework).validate(c)
        if task.need == FIRST:
            data, _ = tr._measure(env, task.trial_id, c, rec, "candidate", first=True)
            if task.kind == "moe_tune":
                ok, why = moe.engagement(data["diagnoses"], c.moe_configs)
                rec.note("moe", ("engaged: " if ok else "NOT engaged: ") + why)
                if not ok:
                    result = Result(verdict="reverted", code="moe_not_engaged", reason=f"tuned MoE config not used: {why}")
        elif task.need == REPEAT and task.side:
            side = c if task.side == "candidate" else Candidate.model_validate(task.incumbent)
            tr._measure(env, task.trial_id, side, rec, task.side, nth=task.nth)
        elif task.need == REPEAT:
            tr._repeat(env, task.trial_id, c, Candidate.model_validate(task.incumbent), rec)
        elif task.need == EVALUATE:
            tr._evaluate(env, c, rec)
            out["evals_row"] = next(d for r, d, _, _ in rec.rows if r == "candidate")
        else:
            raise ValueError(f"unknown need {task.need!r}")
    except LaunchFailure as e:
        result = tr._failed(env, task.trial_id, c, rec, e)
    except RequestsRefused as e:
        rec.refused(e.diagnosis())
        result = Result(verdict="failed", code="requests_refused", reason=f"requests refused: {e}")
    except Exception as e:  # noqa: BLE001  an invalid candidate or a broken tree fails this trial only
        result = Result(verdict="failed", code="error", reason=f"{type(e).__name__}: {e}")
    out.update(rows=rec.rows[held:], outcome=rec.outcome, diagnoses=rec.diagnoses, log_excerpt=rec.log_excerpt,
               events=rec.events, result=result.model_dump() if result else None,
               ground_s=sb.elapsed_s() - g0, wall_s=time.time() - t0)
    return out


@dataclass
class Lost:
    """The worker or node running a task went away (its process killed, the node down)."""
    reason: str


class Executor(Protocol):
    def submit(self, task: Task) -> object: ...  # a handle

    def wait(self, handles: list) -> tuple[object, dict | Lost]: ...  # one finished handle, its result

    def cancel(self, handles: list) -> None: ...  # stop these tasks (their servers stop)


class InlineExecutor:
    """Runs each task in this process when it is waited for, oldest first (tests, benchmarks)."""

    def __init__(self):
        self._n, self._tasks = 0, {}

    def submit(self, task: Task) -> int:
        self._n += 1
        self._tasks[self._n] = task
        return self._n

    def wait(self, handles: list) -> tuple[int, dict]:
        h = min(handles)
        return h, run(self._tasks.pop(h))

    def cancel(self, handles: list) -> None:
        for h in handles:
            self._tasks.pop(h, None)
