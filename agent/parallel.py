"""Up to N trials at once, decided as if one at a time (issue 18).

The driver (this module, in the `agent` process) is the ledger's only writer. It asks the planner
for proposals while fewer than N trials are open, records each (so the next ask sees it: the
planners are rebuilt from the ledger and skip what is queued), and hands their work to an
`Executor` (agent/cluster.py runs it as Ray tasks, one per node; agent/worker.py's
`InlineExecutor` runs it in process). Results are handled in the order their tasks end on the
ground clock, and the keep/revert rule decides the open trials strictly in proposal order against
one incumbent, so a run's verdicts never depend on which worker finished first.

A batch holds candidates of one phase. Once that phase has nothing more to propose and nodes are
free (from the start: the framework phase's trials leave nodes idle), candidates of the next phase
run ahead on a provisional incumbent (agent/speculate.py) and
are decided in their turn against the real one; a change that won on its base but that the
incumbent lacks (a sibling's, kept or outrun) is proposed again on the incumbent before the
planner's next candidate (speculate.rebase). A patch, or a trial that waits on a human, is not
recorded until every open trial is decided (a patch changes the driver's source tree). A trial
the rule wants repeated or evaluated gets its follow-up while it heads the queue, before anything
new is sent, unless a trial behind it is kept clearly above both it and the incumbent (then the
head is reverted as superseded, its follow-up stopped if out: kept or not, it could not stay the
incumbent): a repeat spreads its sides over the free nodes (agent/fanout.py), and the nodes it
leaves take the repeats the trials behind it will want against the same incumbent (void, on their
incumbent side, if the head is kept), then new trials.

Ground time: the driver is a discrete-event schedule of N nodes. Every task starts at the driver's
ground clock when it is sent and ends its own ground seconds later (the sim's clock; a real node's
elapsed time). The driver handles results in the order of those ends, and its clock moves to each
end as it does: a node is busy until its task's end, whenever the result came back, and nothing
is sent on a result before the ground time it existed. So at most N tasks are open at any ground
instant, and the schedule is the same whichever worker happens to finish first.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from agent import fanout, nodes, report, review_gate, speculate
from agent.decide import EVALUATE, KEEP, REPEAT, REVERT, decide, objective_value
from agent.planners.base import PHASES
from agent.records import Result, Verdict
from agent.trial import LedgerRecorder, counts_for
from agent.worker import FIRST, Executor, Lost, Task
from tools.candidate import Candidate

RETRIES = 1  # a trial whose worker is lost is submitted again this many times, then failed


@dataclass
class Open:
    """A trial recorded and not yet decided."""
    tid: int
    phase: str
    kind: str
    out: dict = field(default_factory=dict)  # handle -> (Task, ground time it started): its tasks on nodes now
    first_data: dict | None = None  # the measurement its first task brought (None: failed, nothing)
    search: bool = False  # a point of a sequential search (Proposal.params)
    base: int | None = None  # the trial it was built on (the incumbent then, or a provisional one)
    lost: int = 0
    review: bool = False  # waits on a human


@dataclass
class Driver:
    rt: nodes.Runtime
    executor: Executor
    workers: int
    ask: object = None  # pending patch -> answer, as agent.run.drive takes
    ground_module: str | None = None
    queue: list[Open] = field(default_factory=list)
    now: float = 0.0
    stop: dict | None = None
    phase: str = PHASES[0]  # the phase being decided (trials of the next one may run ahead)
    back: dict = field(default_factory=dict)  # handle -> result: back from its worker, not yet handled (_next)
    in_order: bool = False  # handle results in ground-time order (a ground whose clock is modeled)
    held: int | None = None  # the head whose repeat waits for a second node to free up
    beside: set = field(default_factory=set)  # trials of the next phase sent beside this one (_beside)

    # ---- the loop ---------------------------------------------------------------------------
    def run(self) -> dict:
        led = self.rt.ledger
        from sandboxes import registry
        ground = registry.get(self.rt.config.backend, self.rt.config.framework)
        self.in_order = ground.modeled_clock
        if self.ground_module is None:  # the worker imports it, so a ground outside the built-ins registers there too
            self.ground_module = ground.open.__module__
        state = led.meta("parallel") or {}
        self.now = float(state.get("now", 0.0))
        self.inc = led.incumbent()
        self.phase = state.get("phase") or nodes.plan_context(self.rt, self.inc).phase
        self.beside = set(state.get("beside", []))
        led.ground = lambda: {"clock": self.now, "parallel": True}
        self._save()
        led.set_meta("status", "running")
        self._reopen()
        try:
            while True:
                head = self.queue[0] if self.queue else None
                if head and not head.review and (not head.out and self.held != head.tid or self._moot(head)):
                    self._commit(head)  # before anything new: the head's follow-up comes first
                    continue
                self._repeat_ahead()  # then the repeats the trials behind it will want
                if self.stop is None and self.held is None:
                    self._fill()
                if not self.queue:
                    break
                head = self.queue[0]
                if head.review:
                    if self._answer(head) is None:
                        return self._wait_for_review(head)
                else:
                    self._collect()
                    self.held = None
        except BaseException:  # Ctrl-C, or a bug: stop the cluster's trials; no server outlives the run
            self._flush()
            self.executor.cancel([h for o in self.queue for h in o.out])
            self._reap()
            raise
        report.record_node(self.rt, self.stop)
        return {}

    def _reap(self) -> None:
        """Servers the stopped tasks' sandboxes recorded (tools/procs.py), where their dirs are here."""
        from tools import procs
        for d in sorted((Path(self.rt.run_dir) / "nodes").glob("trial-*")):
            killed = procs.reap(d)
            if killed:
                self.rt.ledger.event("reap", f"stopped server process groups of {d.name}: {killed}")

    def _flush(self) -> None:
        """Results back but not handled yet (_next) go into the ledger as they are: a resume does
        not redo a finished measurement."""
        for o in self.queue:
            for h in [h for h in o.out if h in self.back]:
                task, _ = o.out.pop(h)
                res = self.back.pop(h)
                if not isinstance(res, Lost):
                    record(self.rt, o.tid, task, res)

    def _reopen(self) -> None:
        """A resumed run: its undecided trials go back into the queue, in order; work that had not
        come back is submitted again (a finished measurement is in the ledger and is not redone)."""
        for t in self.rt.ledger.trials():
            if t["status"] != "done":
                self._route(t)

    def _fill(self) -> None:
        led, cfg = self.rt.ledger, self.rt.config
        # At a quiet point every open trial's first measurement is back: the other N - 1 nodes may
        # take new trials, however many measured ones wait to be decided (agent/speculate.py).
        quiet, added = speculate.quiet(self.queue), 0
        while len(self.queue) < self.workers or (quiet and added < self.workers - 1):
            if self._busy() >= self.workers:
                return  # every node is busy (a repeat's sides take several)
            used = self._budget_used()
            if used is not None:
                if not self.queue:  # with trials open, decide them first: the check runs again after
                    self.stop = used
                return
            if self.queue and (self.queue[-1].kind == "patch" or self.queue[-1].review):
                return  # a patch runs alone: the driver's tree must show the planner what it changed
            if not self.queue:
                # nothing open: the run is where its furthest trial got, as one trial at a time is (a
                # trial that ran ahead and failed is answered in its own phase, not walked past); one
                # sent beside this phase does not move it (this phase may have more to propose)
                self.phase = max((t["phase"] for t in led.trials() if t["id"] not in self.beside),
                                 key=PHASES.index, default=self.phase)
            elif not self._phase_open():
                # this phase is decided and trials of the next ran ahead: the run moves on to their
                # phase (its failures are answered there; this phase is not walked again)
                self.phase = min((o.phase for o in self.queue), key=PHASES.index)
                self._save()
            # a change of this batch the incumbent lost comes before the planner's next (agent/speculate.py)
            rebased = speculate.rebase(led, self.inc, self.phase, cfg.objective, cfg.gate)
            p = rebased or self._ask(self.inc)
            if p.kind == "stop" and speculate.starting(self.queue, self.inc):
                p = self._ask(self.queue[0].tid)  # with nothing decided, what comes next builds on the baseline
            if not self.queue and p.kind != "patch" and (p.kind == "stop" or p.phase != self.phase):
                # this phase has nothing more: a trial sent beside it that failed is answered in its own
                # phase before the run goes past it, as one trial at a time would meet it there
                failed = [t["phase"] for t in led.trials() if t["id"] in self.beside and t["verdict"] == "failed"
                          and PHASES.index(t["phase"]) > PHASES.index(self.phase)]
                if failed:
                    self.phase = min(failed, key=PHASES.index)
                    self._save()
                    p = self._ask(self.inc)
            if p.kind == "stop":
                if not self.queue:  # with trials open, their verdicts may open new candidates
                    self.stop = {"stop_reason": p.description}
                return
            if not self.queue and p.kind != "patch" and p.phase != self.phase:
                self.phase = p.phase  # this phase has nothing more: the next one begins
                self._save()
            base, tag, aside = self.inc, "", False
            if self.queue and (p.kind == "patch" or p.phase != self.phase or self._search_after_screens(p)):
                spec = self._speculate(p, quiet or speculate.starting(self.queue, self.inc)
                                      or speculate.settled(led, self.queue, self.inc, self.phase, self.beside))
                tag = f" (ahead, on trial {spec[1]})" if spec else ""
                if spec is None and (spec := self._beside()) is not None:
                    tag, aside = f" (beside the {self.phase} phase, on trial {spec[1]})", True
                if spec is None:
                    return  # ask again once the open trials are decided (or measured)
                p, base = spec
            if base is not None and not rebased and self._walked(p, base):
                return  # the same step is open on another base: wait for its verdict
            tid = led.atomic(lambda: nodes._add_trial(self.rt, p, base))  # its patch row and the trial, or neither
            if aside:
                self.beside.add(tid)
                self._save()
            review_gate.gate(led, cfg, tid)
            self.rt.progress(f"[{p.phase}] trial {tid}: {p.description}{tag}")
            self._route(led.trial(tid))
            added += 1

    def _walked(self, p, base: int) -> bool:
        """An open trial of the proposal's phase, built on another base, makes the same change (a
        layout sent ahead on a provisional incumbent, proposed again on the real one): the phase
        is not walked twice at once. Other changes go out on the new base at once (trials that
        ran ahead on a base then outrun do not hold back the rest of the phase)."""
        led = self.rt.ledger
        cand = lambda tid: Candidate.model_validate(led.trial(tid)["candidate"])  # noqa: E731
        mine = speculate.change(cand(base), p.candidate)
        return any(o.phase == p.phase and o.base not in (None, base) and o.kind != "patch"
                   and speculate.change(cand(o.base), cand(o.tid)) == mine for o in self.queue)

    def _ask(self, inc: int | None, phase: str | None = None):
        ctx = nodes.plan_context(self.rt, inc)
        ctx.at_phase = phase or self.phase  # trials that ran ahead do not move the planner's phase
        return self.rt.planner.propose(ctx)

    def _phase_open(self) -> bool:
        # a trial sent beside this phase keeps it open: the run moves on when this phase has nothing more
        return any(PHASES.index(o.phase) <= PHASES.index(self.phase) or o.tid in self.beside for o in self.queue)

    def _search_after_screens(self, p) -> bool:
        """A sequential search's point while the phase's other trials are open: it should build
        on what they find (in one-at-a-time runs it comes after them)."""
        return bool(p.params) and any(o.phase == p.phase and not o.search for o in self.queue)

    def _speculate(self, p, ready: bool) -> tuple | None:
        """A candidate to run ahead while this phase's last trials are decided: (proposal, the trial
        it builds on), or None (a barrier, or nothing worth it yet). `ready`: a quiet or settled
        point (agent/speculate.py)."""
        if p.kind == "patch" or not ready or not speculate.allowed(self.queue, self.phase, p.phase):
            return None
        cfg = self.rt.config
        base = speculate.provisional(self.rt.ledger, self.queue, self.inc, cfg.objective, cfg.gate)
        if base != self.inc:
            p = self._ask(base)
            if p.kind in ("stop", "patch") or not speculate.allowed(self.queue, self.phase, p.phase):
                return None
        return p, base

    def _beside(self) -> tuple | None:
        """From the flags phase on, nodes this phase leaves idle (its screens out, its search points
        waiting for them, a head repeating) take the next phase's candidates on the incumbent: (proposal,
        the incumbent), or None. They are decided in their turn like any trial, but the run stays in this
        phase (what it has left to propose builds on whatever they win) until it has nothing more.
        Measured on the sim at 4 workers, seeds 0-5 (tests/perf/parallel_speedup.py): the layouts of an
        MoE model (+15-45% on these pairs) no longer wait for a flags search worth a few percent."""
        i = PHASES.index(self.phase)
        if i < PHASES.index("flags") or i + 1 >= len(PHASES):
            return None
        if any(o.kind == "patch" or o.review for o in self.queue):
            return None
        p = self._ask(self.inc, PHASES[i + 1])
        if p.kind in ("stop", "patch") or p.phase != PHASES[i + 1] or p.params:
            return None
        return p, self.inc

    def _save(self) -> None:
        self.rt.ledger.set_meta("parallel", {"workers": self.workers, "now": self.now, "phase": self.phase,
                                             "beside": sorted(self.beside)})

    def _budget_used(self) -> dict | None:
        led, cfg = self.rt.ledger, self.rt.config
        if cfg.budget.trials is not None and led.launched_count() >= cfg.budget.trials:
            return {"stop_reason": f"trial budget of {cfg.budget.trials} used"}
        if cfg.budget.time_s is not None and self.now >= cfg.budget.time_s:
            return {"stop_reason": f"time budget of {cfg.budget.time_s:.0f} s used"}
        why = nodes._workload_refused(led.trials(), self.inc)
        return {"stop_reason": why, "failed": "workload"} if why else None

    def _route(self, t: dict) -> None:
        o = Open(t["id"], t["phase"], t["kind"], search=bool(t["proposal"].get("params")), base=t["incumbent_id"])
        r = nodes._route_for(self.rt, t)
        if r["route"] == "apply":
            r = nodes.apply(self.rt, {"trial": t["id"]})
        if r["route"] == "propose":  # finished by its review (rejected, skipped) or a patch that did not apply
            return
        o.review = r["route"] == "review"
        self.queue.append(o)
        if not o.review and not self.rt.ledger.measurements(t["id"], "candidate"):
            self._submit(o, FIRST)

    # ---- tasks ------------------------------------------------------------------------------
    def _busy(self) -> int:
        return sum(len(o.out) for o in self.queue)

    def _submit(self, o: Open, need: str) -> None:
        self._send(o, self._task(o, need))

    def _repeat(self, o: Open, spread_only: bool = False) -> None:
        """The head's repeats: side by side on the free nodes, or both sides on one node in turn."""
        rec = LedgerRecorder(self.rt.ledger, o.tid, self.inc)  # the series decide() just read
        inc, cand = rec.series()
        free = self.workers - self._busy()
        if not spread_only:  # half the nodes at most: the rest take what comes next (_beside, speculation)
            free = min(free, max(2, self.workers // 2))
        parts = fanout.sides(len(inc), rec.count("incumbent"), len(cand), self.rt.config.gate.max_repeats, free)
        if not parts:
            if spread_only:
                return None
            if self._busy() and self.workers > 1:
                # one node free: both sides on it in turn would take two measurements' time; the
                # next task to end frees a second, so the sides wait for it (nothing new takes it)
                self.held = o.tid
                return None
            return self._submit(o, REPEAT)
        base = self._task(o, REPEAT)
        for i, (side, nth) in enumerate(parts):  # each side its own dir: two nodes of one host never share a tree
            self._send(o, replace(base, side=side, nth=nth, step=base.step + i,
                                  work_dir=f"{base.work_dir}-{side}-{nth}"))

    def _repeat_ahead(self) -> None:
        """While the head repeats, the open trials behind it that the rule would repeat too get their
        repeats now on the nodes left, against the same incumbent: the measurements a one-at-a-time
        run takes in their turn whenever the head is not kept (the same bench seeds). A kept head
        voids their incumbent side (counts_for); the candidate side stands."""
        cfg = self.rt.config
        if not self.queue or not any(task.need == REPEAT for task, _ in self.queue[0].out.values()):
            return
        for o in self.queue[1:]:
            if o.out or o.review or o.kind == "patch" or o.first_data is None or o.base != self.inc:
                continue
            if self.rt.ledger.trial(o.tid)["status"] == "done":
                continue
            if decide(*LedgerRecorder(self.rt.ledger, o.tid, self.inc).series(), cfg.objective, cfg.gate).decision == REPEAT:
                self._repeat(o, spread_only=True)

    def _send(self, o: Open, task: Task) -> None:
        o.out[self.executor.submit(task)] = (task, self.now)  # it starts now on the ground clock

    def _task(self, o: Open, need: str) -> Task:
        led = self.rt.ledger
        t = led.trial(o.tid)
        led.start_trial(o.tid)
        c = Candidate.model_validate(t["candidate"])
        review_gate.require(led, self.rt.config, c)  # nothing unreviewed reaches a node
        inc_t = led.trial(self.inc) if self.inc is not None else None
        return Task(trial_id=o.tid, step=len(led.measurements(o.tid)) + (need == EVALUATE) * 1000,
                      need=need, kind=t["kind"], config=self.rt.config.model_dump(mode="json"),
                      candidate=t["candidate"], patches=_patches(led, c),
                      work_dir=str(Path(self.rt.run_dir) / "nodes" / f"trial-{o.tid:04d}"),
                      incumbent=inc_t["candidate"] if inc_t else None, incumbent_id=self.inc,
                      incumbent_patches=_patches(led, Candidate.model_validate(inc_t["candidate"])) if inc_t else [],
                      incumbent_data=[m["data"] for m in led.measurements(self.inc, "candidate")] if inc_t else [],
                      rows=[(m["role"], m["data"], m["wall_s"], m["ground_s"]) for m in led.measurements(o.tid)
                            if counts_for(m, self.inc)],
                      ground_module=self.ground_module)

    def _collect(self) -> None:
        """Record the results that end next on the ground clock (see _next)."""
        for handle, res in self._next():
            o = next((x for x in self.queue if handle in x.out), None)
            if o is None:
                continue  # dropped by a result handled just before (its trial ended)
            task, start = o.out.pop(handle)
            if isinstance(res, Lost):
                self._lost(o, task, res)
                continue
            # what is done next is done knowing this, so no earlier (and so after every task it follows)
            self.now = max(self.now, start + float(res.get("ground_s") or 0.0))
            record(self.rt, o.tid, task, res)
            if task.need == FIRST:
                o.first_data = speculate.first_data(res)
            if res["result"]:  # that part ended the trial (a side failed to launch): the others are moot
                self._drop(o)

    def _next(self) -> list[tuple]:
        """[(handle, result)] of the open tasks that end first on the ground clock (several when they
        end at the same instant). A node is busy until its task's ground end, so the driver acts in
        that order: on a ground whose clock is modeled (the sim) it waits for every open task first
        (they take seconds of wall time; a result waiting its turn is in memory only, and a crash
        re-runs it on resume with the same seeds); on real nodes the wall clock is the ground clock
        and results come in that order anyway, each recorded as it comes."""
        out = {h: (o.tid, t, s) for o in self.queue for h, (t, s) in o.out.items()}
        if not self.in_order:
            return [self.executor.wait(list(out))]
        while pending := [h for h in out if h not in self.back]:
            h, res = self.executor.wait(pending)
            self.back[h] = res
        def end(h):
            res = self.back[h]
            return out[h][2] + (0.0 if isinstance(res, Lost) else float(res.get("ground_s") or 0.0))
        first = min(end(h) for h in out)
        due = sorted((h for h in out if end(h) == first), key=lambda h: (out[h][0], out[h][1].step))
        return [(h, self.back.pop(h)) for h in due]

    def _drop(self, o: Open) -> None:
        if o.out:
            self.executor.cancel(list(o.out))
            for h in o.out:
                self.back.pop(h, None)
            o.out.clear()

    def _lost(self, o: Open, task: Task, res: Lost) -> None:
        led = self.rt.ledger
        o.lost += 1
        if o.lost <= RETRIES:
            led.event("worker", f"trial {o.tid}: worker lost ({res.reason}); submitted again")
            self.rt.progress(f"  trial {o.tid}: worker lost ({res.reason}); retrying")
            self._send(o, task)
            return
        self._drop(o)
        led.finish_trial(o.tid, Result(verdict="failed", code="error",
                                       reason=f"worker lost {o.lost} times: {res.reason}"))
        self.rt.progress(f"  trial {o.tid}: failed, worker lost ({res.reason})")

    # ---- deciding, in order -----------------------------------------------------------------
    def _commit(self, head: Open) -> None:
        rt, led, inc = self.rt, self.rt.ledger, self.inc
        t = led.trial(head.tid)
        moot = bool(head.out) or self.held == head.tid  # its follow-up, made moot (_moot)
        if moot:
            self._drop(head)
            self.held = None
        if t["status"] != "done":
            rec = LedgerRecorder(led, head.tid, inc)
            v = decide(*rec.series(), rt.config.objective, rt.config.gate)
            x = self._superseded(head, rec) if moot or v.decision in (REPEAT, EVALUATE) else None
            if x is not None:
                v = Verdict(decision=REVERT, code="superseded", numbers=v.numbers,
                            reason=f"superseded by trial {x}, kept clearly above both this trial and the "
                                   f"incumbent (evals passed): kept or not, this one could not stay the "
                                   f"incumbent (so far: {v.code})")
            elif v.decision in (REPEAT, EVALUATE):
                if v.decision == REPEAT:
                    self._repeat(head)
                else:
                    self._submit(head, EVALUATE)
                if head.out:  # (not when its repeat waits for a node)
                    rt.progress(f"  trial {head.tid} {v.decision}: {v.reason}")
                return
            led.finish_trial(head.tid, Result.of(v, rec.ground_s()))
            t = led.trial(head.tid)
        self.queue.pop(0)
        if t["verdict"] == "kept":
            self.inc = head.tid
            if PHASES.index(head.phase) > PHASES.index(self.phase) and head.tid not in self.beside:
                # a trial that ran ahead was kept, the trials before it decided in the same breath:
                # the run is in its phase (asked at the old one, the planner would walk it again)
                self.phase = head.phase
        elif inc is not None:  # the driver's tree shows the planner the incumbent's source
            try:
                nodes._sync_tree(rt, Candidate.model_validate(led.trial(inc)["candidate"]))
            except Exception as e:  # noqa: BLE001
                led.event("patch", f"could not restore the tree after trial {head.tid}: {e}")
        self._save()
        best = None
        if self.inc is not None:
            ms = [m["data"] for m in led.measurements(self.inc, "candidate")]
            best = max(objective_value(m, rt.config.objective) for m in ms) if ms else None
        rt.progress(f"  trial {head.tid} -> {t['verdict']}: {t['reason']}" + (f"  | best {best:.1f}" if best else "")
                    + f"  | ground {self.now:.0f} s")
        # (ground time, best objective) after each verdict: how fast the run got where it got
        led.set_meta("curve", [*(led.meta("curve") or []), [self.now, best]])

    def _moot(self, head: Open) -> bool:
        """The head's follow-up (out, or waiting for a node) is moot: a trial behind it supersedes it."""
        if head.review or any(task.need == FIRST for task, _ in head.out.values()):
            return False
        if not head.out and self.held != head.tid:
            return False
        return self._superseded(head, LedgerRecorder(self.rt.ledger, head.tid, self.inc)) is not None

    def _superseded(self, head: Open, rec: LedgerRecorder) -> int | None:
        """An open trial behind the head that the rule already keeps against the incumbent (evals
        passed, on what it has measured) and that is clearly above the head's candidate too (the
        rule's own test, the head's measurements standing in for the incumbent's). Were the head
        kept, that trial would be kept over it; if not, against the incumbent: either way the head
        is not the run's incumbent once both are decided, so its repeats or evals would only hold
        back the verdicts behind it. (One trial at a time never has a trial behind the head.)"""
        cfg, led = self.rt.config, self.rt.ledger
        if head.kind == "patch":
            return None
        mine = rec.series()[1]
        for o in self.queue[1:]:
            if o.kind == "patch" or o.review or led.trial(o.tid)["status"] == "done":
                continue
            inc, cand = LedgerRecorder(led, o.tid, self.inc).series()
            if (cand and decide(inc, cand, cfg.objective, cfg.gate).decision == KEEP
                    and decide(mine, cand, cfg.objective, cfg.gate).decision in (KEEP, EVALUATE)):
                return o.tid
        return None

    # ---- reviews ----------------------------------------------------------------------------
    def _answer(self, head: Open) -> dict | None:
        from agent.review import ask_on_terminal
        led = self.rt.ledger
        for p in led.trial_reviews(head.tid):
            if p["status"] != "pending":
                continue
            answer = self.ask(p) if self.ask is not None else ask_on_terminal(self.rt.config.approve, p)
            if answer is None:
                return None
            led.decide_patch(p["id"], answer["status"], by=answer["by"], reason=answer.get("reason", ""))
        self.queue.pop(0)
        self._route(led.trial(head.tid))
        return {}

    def _wait_for_review(self, head: Open) -> dict:
        while self._busy():  # keep what the others measure
            self._collect()
        self.rt.ledger.set_meta("status", "waiting_for_review")
        pid = next(p["id"] for p in self.rt.ledger.trial_reviews(head.tid) if p["status"] == "pending")
        return {"waiting": pid}


def record(rt: nodes.Runtime, tid: int, task: Task, res: dict) -> None:
    """Write one task's result into the ledger (the driver's job: workers never write)."""
    led = rt.ledger
    if res.get("candidate"):  # the tuner ran: its configs are spent for good
        led.update_trial(tid, candidate=res["candidate"])
        led.event("moe", f"trial {tid}: tuned -> {Candidate.model_validate(res['candidate']).moe_configs}")
    for role, data, wall_s, ground_s in res["rows"]:
        if role == "incumbent" and task.incumbent_id is not None:
            data = {**data, "vs": task.incumbent_id}  # which incumbent it measured (agent/trial.py counts_for)
        led.add_measurement(tid, role, data, wall_s=wall_s, ground_s=ground_s)
    if res.get("evals_row"):
        first = led.measurements(tid, "candidate")[0]
        led.set_measurement(first["id"], res["evals_row"])
    if res["outcome"] == "launched" and task.need == FIRST:
        led.update_trial(tid, outcome="launched", diagnoses=res["diagnoses"])
    elif res["outcome"] == "launch_failed":
        led.update_trial(tid, outcome="launch_failed", diagnoses=res["diagnoses"], log_excerpt=res["log_excerpt"])
    for kind, message in res["events"]:
        led.event(kind, message)
    if res["result"]:
        r = Result.model_validate(res["result"])
        led.finish_trial(tid, r.model_copy(update={"ground_s": r.ground_s if r.ground_s is not None else
                                                   sum((m["ground_s"] or 0) for m in led.measurements(tid))}))
        rt.progress(f"  trial {tid}: {r.reason}")


def _patches(led, c: Candidate) -> list:
    out = []
    for pid in c.patches:
        p = led.patch(pid)
        if p["status"] != "approved":
            raise nodes.patchtool.PatchRefused(f"patch {pid} is {p['status']}, not approved")
        out.append((pid, p["diff"], p["fix"]))
    return out
