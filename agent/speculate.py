"""Cross-phase speculation for the parallel driver (agent/parallel.py, issue 18).

A phase's last trials often leave nodes idle: the next phase builds on this phase's winner, which
is not decided yet (a winner is repeated and evaluated before it is kept). Rather than wait, the
driver proposes the next phase's candidates on a *provisional* incumbent: the one the open trials
would leave if each were decided on its first measurement, in proposal order (often the
incumbent itself). A sequential search's points (Optuna, Proposal.params) are treated the same way
while the phase's screens are open: they build on what the screens found. Each candidate is a
full configuration, decided later in proposal order against whatever the real incumbent is by
then: one built on a winner is what the run would have proposed anyway, one built on a loser just
loses (and spends a trial of the budget).

The driver speculates once every open trial's first measurement is back (`quiet`), so the
provisional incumbent is read from all of them; at that ground time only follow-ups (repeats,
evals) keep nodes busy, and the others may take new trials however many measured ones wait to be
decided. It also speculates, on the incumbent, as soon as the phase has kept a trial and what is
still open of the phase is built on it (`settled`): an open trial then replaces the incumbent only
by beating it, and whatever ran ahead is decided against that one in its turn. (The driver handles
results in ground-time order, agent/parallel.py: what it builds on existed by the time the
speculative task starts.) Before anything is decided (`starting`), the next phase builds on the
baseline while the framework phase's trials are out.

Trials built on one base and decided one after another each against what was kept before it lose
changes one trial at a time would have added up: `rebase` proposes the incumbent with the changes
that won on their own bases and that the incumbent lacks, all in one trial.
"""
from __future__ import annotations

from agent.decide import EVALUATE, KEEP, decide
from agent.planners.base import PHASES, Proposal, in_order
from agent.worker import FIRST
from tools import frameworks, moe
from tools.candidate import Candidate

AHEAD = 1  # phases a speculative candidate may run ahead of the phase being decided
# a trial reverted for these lost on performance to what was kept before it (not on its evals)
OUTRUN = ("no_gain", "within_noise", "not_beyond_noise", "single_stream_drop", "superseded")


def quiet(queue: list) -> bool:
    """Every open trial's first measurement is back (what is out is follow-ups: repeats, evals):
    the provisional incumbent is then read from all of them."""
    return bool(queue) and all(task.need != FIRST for o in queue for task, _ in o.out.values())


def settled(led, queue: list, inc: int | None, phase: str, beside=()) -> bool:
    """The phase being decided has kept a trial (the incumbent is its own) and every open trial is
    built on the incumbent, a configuration of that phase or one that ran ahead of it: the next
    phase may build on the incumbent before their first measurements are back, on every idle node.
    (Before the phase has kept anything, its open trials are what the next phase should build on,
    and a failure among them is answered in this phase first.) Trials sent beside the phase
    (`beside`, Driver._beside) count as its own. Measured on the sim at 8 workers: GLM-5.2's flags
    screens no longer wait ~1500 s of ground time behind the first one sent ahead of the MTP
    phase's last trial (tests/perf/parallel_speedup.md)."""
    if inc is None or (led.trial(inc)["phase"] != phase and inc not in beside):
        return False
    return all(o.tid in beside or (PHASES.index(o.phase) >= PHASES.index(phase) and o.base == inc
                                   and o.kind != "patch" and not o.review) for o in queue)


def starting(queue: list, inc: int | None) -> bool:
    """Nothing is decided yet and every open trial is the first phase's (the baseline, the other
    frameworks) or ran ahead of it: the next phase may build on the baseline before their
    measurements are back. Its candidates take every framework still out as one that serves the
    model (agent/planners/builtin.py), so they go out in the order one trial at a time proposes them
    once the frameworks are ranked; one whose framework then fails, or fails its evals, loses in its
    turn. Measured on the sim at 8 workers: the framework phase's round (~2300-2800 s of ground
    time) no longer holds five idle nodes (tests/perf/parallel_speedup.md)."""
    return inc is None and bool(queue) and all(o.phase in PHASES[:1 + AHEAD] and o.kind != "patch" and not o.review
                                               for o in queue)


def allowed(queue: list, base: str, phase: str) -> bool:
    """May a candidate of `phase` run ahead while the base phase's trials are open? (The driver
    asks only at a quiet, settled or starting point.)"""
    if any(o.kind == "patch" or o.review for o in queue):
        return False  # a patch or a human review stays a barrier (a patch changes the driver's tree)
    ahead = PHASES.index(phase) - PHASES.index(base)
    return 0 <= ahead <= AHEAD


def provisional(led, queue: list, inc: int | None, objective: str, gate) -> int | None:
    """The incumbent the open trials would leave if each were decided on its first measurement
    alone, in proposal order (the keep/revert rule's own test: one that passes on performance is
    taken as kept; one within noise or worse as reverted). Only first measurements count: a
    follow-up of the head may or may not be back yet."""
    if inc is None:  # nothing decided yet (`starting`): the baseline, kept on whatever it measures
        if not queue or queue[0].tid != led.trials()[0]["id"]:
            return None
        if queue[0].first_data is None:
            return queue[0].tid
        inc, queue = queue[0].tid, queue[1:]
    cur, series = inc, [m["data"] for m in led.measurements(inc, "candidate")]
    for o in queue:
        if o.first_data is None or o.kind == "patch":
            continue
        if decide(series, [o.first_data], objective, gate).decision in (KEEP, EVALUATE):
            cur, series = o.tid, [o.first_data]
    return cur


def first_data(res: dict) -> dict | None:
    """A first task's candidate measurement: None where it ended the trial (failed; a trial is
    kept only by the driver's decision) or measured nothing."""
    if res.get("result"):
        return None
    return next((data for role, data, _, _ in res["rows"] if role == "candidate"), None)


def rebase(led, inc: int | None, phase: str, objective: str, gate) -> Proposal | None:
    """The incumbent with the changes it lacks that won on their own bases: trials of one batch are
    built on one base and decided one after another against whatever was kept before them, so a
    trial kept over a sibling (or over a trial the phase before kept while it ran ahead) drops the
    sibling's change, and a sibling that beat the base but not the trial kept before it is lost,
    where one trial at a time would have built each on the other. Such changes, in proposal order,
    that are not already in the incumbent, do not clash with a change of its own, were not tried,
    and did not lose against an incumbent they were tried on: all of them in one trial, as one
    trial at a time adds them up (once that was tried, the first alone); None where there is none.
    Read from the ledger alone (a resumed run proposes the same); one trial at a time builds every
    trial on the incumbent it is decided against, so it never gets one. Measured on GLM-5.2/MI355X
    at 8 workers: each carried in a trial of its own, a change came a round after the one before it
    (tests/perf/parallel_speedup.md)."""
    if inc is None:
        return None
    trials = led.trials()
    by_id = {x["id"]: x for x in trials}
    cand = {i: Candidate.model_validate(x["candidate"]) for i, x in by_id.items()}
    tried, lost, steps = {c.key() for c in cand.values()}, None, []
    for y, prev in in_order(trials):
        base, won = y["incumbent_id"], None
        if y["status"] == "done" and base is not None and prev is not None and base != prev:
            if y["verdict"] == "kept":
                won = prev  # what y replaced beat its own base (or it would not have been kept)
            elif y["reason_code"] in OUTRUN and _won(led, base, y["id"], objective, gate):
                won = y["id"]
        if won is None:
            continue
        # won's change over its own base, where y's base was kept (a trial sent beside that base's
        # parent: over y's base, its change would also undo y's base's own); over y's base where that
        # lost (y ran ahead on a loser: what replaces the loser's change is won's)
        src = by_id[won]["incumbent_id"] if by_id[base]["verdict"] == "kept" else base
        new = carry(cand[src], cand[won], cand[inc]) if src is not None else None
        if new is not None and new.key() not in tried:
            lost = _lost(trials, cand) if lost is None else lost
            if change(cand[inc], new) not in lost:
                steps.append((won, new))
    if not steps:
        return None
    combo, used = cand[inc], []
    for won, one in steps:
        nxt = carry(cand[inc], one, combo)
        if nxt is not None:
            combo, used = nxt, [*used, won]
    if len(used) < 2 or combo.key() in tried or change(cand[inc], combo) in lost:
        used, combo = [steps[0][0]], steps[0][1]
    ids, many = ", ".join(map(str, used)), len(used) > 1
    return Proposal(kind="config", phase=phase, candidate=combo,
                    description=f"trial {inc} with what trial{'s' * many} {ids} changed: {_changes(cand[inc], combo)}",
                    rationale=f"trial{'s' * many} {ids} won on {'their' if many else 'its'} own base, but trial {inc}, "
                              f"the incumbent, does not carry {'them' if many else 'it'}")


def _lost(trials: list, cand: dict) -> list:
    """The steps (change over the trial's own base) that lost against that very base: one trial at
    a time does not walk a losing step again. A trial reverted against another incumbent, kept
    while it ran, was outrun, not beaten: its step may still win where it is carried. A step still
    open elsewhere is the driver's to hold (Driver._walked). Measured on GLM-5.2/MI355X seed 2: it
    had carried two losing flags onto six incumbents in turn at 8 workers (0.30 -> 0.28 of one
    worker's time with this rule); counting outrun trials too kept a winning fusion off the final
    incumbent at 2 workers (97% -> 91%), and counting open ones delayed it (0.63 -> 0.68). A trial
    reverted as superseded was not judged at all (a trial behind it was kept clearly above it)."""
    return [change(cand[prev], cand[z["id"]]) for z, prev in in_order(trials)
            if prev is not None and z["status"] == "done" and z["verdict"] != "kept" and z["incumbent_id"] == prev
            and z["reason_code"] != "superseded"]


def _won(led, base: int, tid: int, objective: str, gate) -> bool:
    """The trial's own measurements beat its base's on performance (evals or not)."""
    b = [m["data"] for m in led.measurements(base, "candidate")]
    c = [m["data"] for m in led.measurements(tid, "candidate")]
    return bool(b and c) and decide(b, c, objective, gate).decision in (KEEP, EVALUATE)


def carry(base: Candidate, prev: Candidate, kept: Candidate) -> Candidate | None:
    """`kept` with the changes `prev` made over `base` that `kept` did not make itself (a field
    both changed keeps kept's value); None where there is nothing to carry. Another framework's
    flags or another tree's patches do not carry."""
    if len({base.framework, prev.framework, kept.framework}) > 1 or prev.patches != base.patches:
        return None
    mine = change(base, kept)
    upd: dict = {}
    for k, v in change(base, prev).items():
        if k in mine:
            continue
        if isinstance(k, tuple):  # a flag or env key: prev's value, or left out where prev left it out
            name, key = k
            d = upd.setdefault(name, dict(getattr(kept, name)))
            if key in getattr(prev, name):
                d[key] = v
            else:
                d.pop(key, None)
        else:
            upd[k] = getattr(prev, k)
    # tuned MoE kernels (and the env variable that points the server at them) belong to the layout
    # they were tuned on: prev's where its layout is carried or it tuned kept's own layout
    layout = upd.get("parallel", kept.parallel)
    if layout != kept.parallel or (prev.moe_configs != base.moe_configs and kept.moe_configs == base.moe_configs
                                   and layout == prev.parallel):
        upd["moe_configs"] = prev.moe_configs
        env = upd.setdefault("env", dict(kept.env))
        for var in _moe_vars(kept):
            if var in prev.env:
                env[var] = prev.env[var]
            else:
                env.pop(var, None)
    return kept.model_copy(update=upd) if upd else None


def change(base: Candidate, c: Candidate) -> dict:
    """What a candidate changes over the one it was built on, field by field (flags and env key by
    key; tuned kernels, and the env variable naming them, go with their layout): two trials making
    the same change on two bases are one step walked twice."""
    a, b = base.model_dump(mode="json"), c.model_dump(mode="json")
    moe_vars = _moe_vars(c)
    out = {}
    for name in b:
        if name in ("flags", "env"):
            out.update({(name, k): b[name].get(k) for k in sorted({*a[name], *b[name]})
                        if a[name].get(k) != b[name].get(k) and not (name == "env" and k in moe_vars)})
        elif name != "moe_configs" and a[name] != b[name]:
            out[name] = b[name]
    return out


def _moe_vars(c: Candidate) -> set[str]:
    """The env variables that point c's server at tuned MoE kernels (tools/moe.install)."""
    return moe.env_vars(frameworks.get(c.framework))


def _changes(old: Candidate, new: Candidate) -> str:
    """A change, for people: "--kv-cache-dtype fp8, TP4 x DP2, MoE kernels tuned for TP4 x DP2"."""
    out = [f"{k[1]} {'(unset)' if v is None else v}" if isinstance(k, tuple)
           else new.parallel.label if k == "parallel" else f"{k} {v}" for k, v in change(old, new).items()]
    if new.moe_configs != old.moe_configs:
        out.append(f"MoE kernels tuned for {new.parallel.label}" if new.moe_configs else "no tuned MoE kernels")
    return ", ".join(out)
