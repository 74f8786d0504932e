"""One unit of a trial's work, run where the sandbox is: on a worker of the cluster, or in process.

A `Task` is plain, picklable data (the run's config as JSON, the candidate, the approved patches'
diffs, the incumbent's measurements for the in-session eval decision): the worker opens its own
sandbox from it by the ground's registered name (sandboxes.registry), does the work and returns
plain JSON. It never touches the ledger: the driver is its only writer (agent/parallel.py).

Each task opens a fresh sandbox seeded by (run seed, trial, step), so what a measurement reads
does not depend on which node ran it or what that node ran before; its ground time is the
sandbox's own clock (the sim's simulated seconds; a real host's elapsed seconds).
"""
from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path

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
    incumbent_patches: list = field(default_factory=list)
    incumbent_data: list = field(default_factory=list)  # its candidate measurements (the eval decision)
    # repeats: {"inc_seq": incumbent-role rows held, "inc_needed": to add, "cand_seq": candidate rows held}
    counts: dict = field(default_factory=dict)
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
    from agent import run as runlib
    from sandboxes import registry
    ground = registry.get(cfg.backend, cfg.framework)
    if ground.suite is not None and cfg.measure.harness != "lm-eval":
        return ground.suite(cfg, work)
    return runlib.default_suite(cfg, card, hw, sandbox)


def _sync(sandbox, c, patches: list, work: Path) -> None:
    from tools import patch as patchtool
    if not patches and not (work / "src" / c.framework).exists():
        return
    patchtool.sync(sandbox.source_tree(c.framework, work), [tuple(p) for p in patches])


def run(task: Task) -> dict:
    """Do the task; returns {"measurements": [...], "ground_s", "wall_s"} plus, where it happened,
    "candidate" (a tuned MoE trial's new candidate), "failure" (launch failed), "refused",
    "not_engaged" or "error"."""
    from agent.decide import EVALUATE as EV, decide
    from agent.measure import bench
    from tools import frameworks, moe
    from tools.bench.refusal import RequestsRefused
    from tools.candidate import Candidate
    from tools.protocols import LaunchFailure

    work = Path(task.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    cfg, card, hw, sb = _open(task)
    version = getattr(sb, "version", None)
    c = Candidate.model_validate(task.candidate)
    fw = frameworks.get(c.framework, version(c.framework) if version else None)
    suite = _suite(cfg, card, hw, sb, work)
    out: dict = {"measurements": [], "pid": _pid()}
    t0, g0 = time.time(), sb.elapsed_s()

    def measure(cand, patches, role: str, seed: int, evals: str) -> dict:
        _sync(sb, cand, patches, work)
        w0, s0 = time.time(), sb.elapsed_s()
        with sb.launch(cand, work) as server:
            diags = [d.model_dump() for d in fw.diagnose(server.log_text())]
            out.setdefault("diagnoses", diags)
            data = bench(server, cfg, hw, cand.parallel.gpus, seed)
            data["diagnoses"] = diags
            if evals == "always" or (evals == "if_due" and
                                     decide(task.incumbent_data, [data], cfg.objective, cfg.gate)["decision"] == EV):
                data["evals"] = suite.run(server.client, limit=cfg.measure.eval_items, seed=cfg.seed)
        out["measurements"].append({"role": role, "data": data, "wall_s": time.time() - w0,
                                    "ground_s": sb.elapsed_s() - s0})
        return data

    try:
        if task.kind == "moe_tune" and not c.moe_configs and task.need == FIRST:
            configs = moe.tune(sb, c, work, f"trial-{task.trial_id}")
            c = moe.install(c, configs, fw)
            out["candidate"] = c.model_dump(mode="json")
        fw.validate(c)
        tid = task.trial_id
        if task.need == FIRST:
            data = measure(c, task.patches, "candidate", cfg.seed + 7919 * tid, "if_due")
            if task.kind == "moe_tune":
                ok, why = moe.engagement(data["diagnoses"], c.moe_configs)
                out["engaged"] = [ok, why]
        elif task.need == REPEAT:  # interleaved as the one-node loop does: incumbent, then candidate
            inc = Candidate.model_validate(task.incumbent)
            k = task.counts
            for seq in range(k["inc_seq"], k["inc_seq"] + k["inc_needed"]):
                measure(inc, task.incumbent_patches, "incumbent", cfg.seed + 7919 * tid + 31 * seq, "never")
            measure(c, task.patches, "candidate", cfg.seed + 7919 * tid + 31 * k["cand_seq"], "never")
        elif task.need == EVALUATE:
            _sync(sb, c, task.patches, work)
            w0, s0 = time.time(), sb.elapsed_s()
            with sb.launch(c, work) as server:
                ev = suite.run(server.client, limit=cfg.measure.eval_items, seed=cfg.seed)
            out["evals"] = ev
            out["eval_ground_s"] = sb.elapsed_s() - s0
        else:
            raise ValueError(f"unknown need {task.need!r}")
    except LaunchFailure as e:
        out["failure"] = {"message": str(e), "excerpt": e.excerpt or "",
                          "diagnosis": e.diagnosis.model_dump() if e.diagnosis else None,
                          "log_path": str(e.log_path) if e.log_path else None}
    except RequestsRefused as e:
        out["refused"] = {"message": str(e), "diagnosis": e.diagnosis()}
    except Exception as e:  # noqa: BLE001  an invalid candidate or a broken tree fails this trial only
        out["error"] = f"{type(e).__name__}: {e}"
    out["ground_s"], out["wall_s"] = sb.elapsed_s() - g0, time.time() - t0
    return out


def _pid() -> int:
    import os
    return os.getpid()
