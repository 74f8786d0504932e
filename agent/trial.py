"""One trial of one candidate, as a plain function: launch -> diagnose -> bench -> evals ->
repeats -> decide, against the incumbent.

`run_trial` knows nothing of the graph or the ledger: it acts through a TrialEnv (the sandbox and
the measuring policy) and writes every step through a Recorder as it happens. The graph's trial
node records into the ledger (LedgerRecorder), so a trial killed half-way resumes from its
recorded measurements; a worker elsewhere can record into a MemoryRecorder and hand the record
back. The returned Result is what the trial ended with; the caller finishes the trial with it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from agent.config import RunConfig
from agent.decide import EVALUATE, REPEAT, decide
from agent.ledger import Ledger
from agent.measure import EvalSuite, bench
from agent.records import Result, Role, Verdict
from tools import moe
from tools.bench.refusal import RequestsRefused
from tools.candidate import Candidate
from tools.frameworks.base import Framework
from tools.hardware import HardwareProfile
from tools.protocols import LaunchFailure, Sandbox


def _nothing(*_a) -> None:
    return None


@dataclass(frozen=True)
class TrialEnv:
    """What a trial measures with."""
    sandbox: Sandbox
    run_dir: Path
    config: RunConfig  # its measure, objective, gate and seed
    hw: HardwareProfile  # prices and TDP for the cost objectives
    suite: EvalSuite
    adapter: Callable[[str], Framework]  # framework -> its adapter for the version the sandbox runs
    prepare: Callable[[Candidate], None] = _nothing  # before each launch: the source tree as c needs it
    progress: Callable[[str], None] = _nothing


class Recorder(Protocol):
    """Where a trial's steps go as they happen, and what it already has (for resume)."""

    def series(self) -> tuple[list[dict], list[dict]]:
        """The incumbent's and the candidate's measurement data so far (decide.py's JSON)."""
        ...

    def count(self, role: Role) -> int: ...  # this trial's measurements of that role
    def last_role(self) -> Role | None: ...  # the role of this trial's newest measurement
    def ground_s(self) -> float: ...  # ground time its measurements spent
    def measured(self, role: Role, data: dict, *, wall_s: float, ground_s: float) -> None: ...
    def evaluated(self, evals: dict) -> None: ...  # evals for the candidate's first measurement
    def launched(self, diagnoses: list[dict]) -> None: ...  # the first launch came up
    def launch_failed(self, diagnoses: list[dict], log_excerpt: str) -> None: ...
    def refused(self, diagnosis: dict) -> None: ...  # the server refused the workload's requests
    def note(self, kind: str, message: str) -> None: ...  # an event worth keeping (log path, MoE)


def run_trial(env: TrialEnv, tid: int, c: Candidate, incumbent: Candidate | None, rec: Recorder, *,
              tune: Callable[[Candidate], Candidate] | None = None, check_moe: bool = False) -> Result:
    """Measure `c` (trial `tid`) until decide() keeps or reverts it; `incumbent` is measured again
    for repeats. `tune` turns c into what is measured (the MoE tuner); `check_moe` reverts a trial
    whose server did not use its tuned MoE configs."""
    try:
        if tune is not None:
            c = tune(c)
        env.adapter(c.framework).validate(c)
        v: Verdict | None = None
        if not rec.series()[1]:
            data, v = _measure(env, tid, c, rec, "candidate", first=True)
            if check_moe:
                ok, why = moe.engagement(data["diagnoses"], c.moe_configs)
                rec.note("moe", ("engaged: " if ok else "NOT engaged: ") + why)
                if not ok:
                    return Result(verdict="reverted", code="moe_not_engaged", reason=f"tuned MoE config not used: {why}")
        elif rec.last_role() == "incumbent":  # killed between the two halves of a repeat: finish it
            assert incumbent is not None, "only a trial with an incumbent measures it"
            _repeat(env, tid, c, incumbent, rec)
        while True:
            if v is None:
                v = decide(*rec.series(), env.config.objective, env.config.gate)
            if v.decision not in (REPEAT, EVALUATE):
                return Result.of(v, rec.ground_s())
            env.progress(f"  {v.decision}: {v.reason}")
            if v.decision == REPEAT:
                assert incumbent is not None, "decide repeats only against an incumbent"
                _repeat(env, tid, c, incumbent, rec)
            else:
                _evaluate(env, c, rec)
            v = None
    except LaunchFailure as e:
        return _failed(env, tid, c, rec, e)
    except RequestsRefused as e:  # the server ran but took none of the requests: the sweep stopped at once
        rec.refused(e.diagnosis())
        env.progress(f"  requests refused: {e}")
        return Result(verdict="failed", code="requests_refused", reason=f"requests refused: {e}")
    except Exception as e:  # noqa: BLE001  an invalid candidate or a broken tree fails this trial only
        if type(e).__name__ in ("KeyboardInterrupt", "SystemExit"):
            raise
        return Result(verdict="failed", code="error", reason=f"{type(e).__name__}: {e}")


def _measure(env: TrialEnv, tid: int, c: Candidate, rec: Recorder, role: Role, *,
             first: bool = False, nth: int | None = None) -> tuple[dict, Verdict | None]:
    """Launch, diagnose the log once, bench, stop; records the measurement. A candidate's
    measurement runs the evals in the same server session when decide, given it, says the eval gate
    is next: one launch, not two (a repeat that settles a within-noise gain too; on a real node a
    launch is minutes). It returns decide's verdict when that verdict still holds for what was
    recorded. `nth`: which measurement of its role this is when the ones before it run elsewhere
    (a repeat's sides on nodes of their own), so its bench seed is the one a one-at-a-time run
    would use; such a side never runs the evals, since it cannot see the whole series."""
    env.prepare(c)
    cfg = env.config
    t0, g0 = time.time(), env.sandbox.elapsed_s()
    env.progress(f"  launching {c.framework} {c.weights} TP{c.parallel.tp}xDP{c.parallel.dp} ..." if first
                 else f"  launching {c.framework} ({role}) ...")
    v = None
    with env.sandbox.launch(c, env.run_dir) as server:
        _note_log(rec, tid, getattr(server, "log_path", None))
        diags = [d.model_dump() for d in env.adapter(c.framework).diagnose(server.log_text())]
        if first:
            rec.launched(diags)
        seed = cfg.seed + 7919 * tid + (0 if first else 31 * (rec.count(role) if nth is None else nth))
        data = bench(server, cfg, env.hw, c.parallel.gpus, seed)
        data["diagnoses"] = diags
        if role == "candidate" and (first or nth is None):  # nth: the other sides are elsewhere
            inc, cand = rec.series()
            v = decide(inc, [*cand, data], cfg.objective, cfg.gate)
            if v.decision == EVALUATE:
                env.progress("  running evals ...")
                data["evals"] = env.suite.run(server.client, limit=cfg.measure.eval_items, seed=cfg.seed)
                v = None  # decided again on the data with its evals
    rec.measured(role, data, wall_s=time.time() - t0, ground_s=env.sandbox.elapsed_s() - g0)
    return data, v


def _repeat(env: TrialEnv, tid: int, c: Candidate, incumbent: Candidate, rec: Recorder) -> None:
    """One more measurement of each side, interleaved: the incumbent, then the candidate."""
    target = rec.count("candidate") + 1
    while len(rec.series()[0]) < target:
        _measure(env, tid, incumbent, rec, "incumbent")
    while len(rec.series()[1]) < target:
        _measure(env, tid, c, rec, "candidate")


def _evaluate(env: TrialEnv, c: Candidate, rec: Recorder) -> None:
    env.prepare(c)
    with env.sandbox.launch(c, env.run_dir) as server:
        evals = env.suite.run(server.client, limit=env.config.measure.eval_items, seed=env.config.seed)
    rec.evaluated(evals)


def _note_log(rec: Recorder, tid: int, path) -> None:
    """Which log file a trial's server wrote (the LLM's read_log tool reads it back)."""
    if path is not None:
        rec.note("log", f"trial {tid}: {path}")


def _failed(env: TrialEnv, tid: int, c: Candidate, rec: Recorder, e: LaunchFailure) -> Result:
    _note_log(rec, tid, getattr(e, "log_path", None))
    diags = [e.diagnosis.model_dump()] if e.diagnosis else []
    seen = {(d["kind"], repr(d["details"])) for d in diags}
    for d in env.adapter(c.framework).diagnose(e.excerpt or ""):
        if (d.kind, repr(d.details)) not in seen:
            diags.append(d.model_dump())
    first = next((d for d in diags if d.get("fatal", True)), None)
    why = f"{first['kind']}: {first['message']}" + (f" ({first['evidence'][0]})" if first and first["evidence"] else "") \
        if first else str(e)
    rec.launch_failed(diags, (e.excerpt or "")[-4000:])
    env.progress(f"  launch failed: {why}")
    return Result(verdict="failed", code="launch_failed", reason=f"launch failed: {why}")


def counts_for(m: dict, inc: int | None) -> bool:
    """Does ledger row `m` count for a decision against incumbent `inc`? An incumbent-side row counts
    only for the incumbent it measured (data["vs"]: the parallel driver tags its rows, since a repeat
    may run ahead of the trial's turn and the incumbent change meanwhile); every other row counts."""
    return m["role"] != "incumbent" or m["data"].get("vs", inc) == inc


class LedgerRecorder:
    """A trial's steps, written to the run's ledger as they happen."""

    def __init__(self, ledger: Ledger, tid: int, incumbent: int | None):
        self.led, self.tid, self.inc = ledger, tid, incumbent

    def series(self) -> tuple[list[dict], list[dict]]:
        cand = [m["data"] for m in self.led.measurements(self.tid, "candidate")]
        if self.inc is None:
            return [], cand
        incs = [m["data"] for m in self.led.measurements(self.inc, "candidate")]
        return incs + [m["data"] for m in self.led.measurements(self.tid, "incumbent") if counts_for(m, self.inc)], cand

    def count(self, role: Role) -> int:
        return sum(counts_for(m, self.inc) for m in self.led.measurements(self.tid, role))

    def last_role(self) -> Role | None:
        ms = self.led.measurements(self.tid)
        return ms[-1]["role"] if ms else None

    def ground_s(self) -> float:
        return sum((m["ground_s"] or 0) for m in self.led.measurements(self.tid))

    def measured(self, role: Role, data: dict, *, wall_s: float, ground_s: float) -> None:
        self.led.add_measurement(self.tid, role, data, wall_s=wall_s, ground_s=ground_s)

    def evaluated(self, evals: dict) -> None:
        first = self.led.measurements(self.tid, "candidate")[0]
        self.led.set_measurement(first["id"], {**first["data"], "evals": evals})

    def launched(self, diagnoses: list[dict]) -> None:
        self.led.update_trial(self.tid, outcome="launched", diagnoses=diagnoses)

    def launch_failed(self, diagnoses: list[dict], log_excerpt: str) -> None:
        self.led.update_trial(self.tid, outcome="launch_failed", diagnoses=diagnoses, log_excerpt=log_excerpt)

    def refused(self, diagnosis: dict) -> None:
        self.led.update_trial(self.tid, diagnoses=[*self.led.trial(self.tid)["diagnoses"], diagnosis])

    def note(self, kind: str, message: str) -> None:
        self.led.event(kind, message)


@dataclass
class MemoryRecorder:
    """A trial's steps kept in memory: for a worker that runs a trial away from the ledger and
    returns the record, and for tests. `incumbent` is the incumbent's own measurement data."""
    incumbent: list[dict] = field(default_factory=list)
    rows: list[tuple[Role, dict, float, float]] = field(default_factory=list)  # role, data, wall_s, ground_s
    outcome: str | None = None
    diagnoses: list[dict] = field(default_factory=list)
    log_excerpt: str = ""
    events: list[tuple[str, str]] = field(default_factory=list)

    def _data(self, role: Role) -> list[dict]:
        return [d for r, d, _, _ in self.rows if r == role]

    def series(self) -> tuple[list[dict], list[dict]]:
        return ([*self.incumbent, *self._data("incumbent")] if self.incumbent else []), self._data("candidate")

    def count(self, role: Role) -> int:
        return len(self._data(role))

    def last_role(self) -> Role | None:
        return self.rows[-1][0] if self.rows else None

    def ground_s(self) -> float:
        return sum(g for *_, g in self.rows)

    def measured(self, role: Role, data: dict, *, wall_s: float, ground_s: float) -> None:
        self.rows.append((role, data, wall_s, ground_s))

    def evaluated(self, evals: dict) -> None:
        i = next(i for i, r in enumerate(self.rows) if r[0] == "candidate")
        role, data, w, g = self.rows[i]
        self.rows[i] = (role, {**data, "evals": evals}, w, g)

    def launched(self, diagnoses: list[dict]) -> None:
        self.outcome, self.diagnoses = "launched", diagnoses

    def launch_failed(self, diagnoses: list[dict], log_excerpt: str) -> None:
        self.outcome, self.diagnoses, self.log_excerpt = "launch_failed", diagnoses, log_excerpt

    def refused(self, diagnosis: dict) -> None:
        self.diagnoses = [*self.diagnoses, diagnosis]

    def note(self, kind: str, message: str) -> None:
        self.events.append((kind, message))
