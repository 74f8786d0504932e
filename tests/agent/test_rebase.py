"""Changes of one batch that one trial at a time would have added up (agent/speculate.py rebase):
trials side by side are built on one base and decided one after another, each against what was
kept before it, so a change that won on its base is carried onto the incumbent that lacks it."""
from __future__ import annotations

from agent.planners.base import Proposal
from agent.planners.builtin import BuiltinPlanner
from agent.speculate import _changes, carry, change
from tests.agent.test_parallel import Scripted, drive
from tools import frameworks
from tools.candidate import Candidate, Parallel

BASE = Candidate(framework="vllm", flags={"--max-num-seqs": 128})


def _c(flags=None, **kw) -> Candidate:
    return BASE.model_copy(update={"flags": {**BASE.flags, **(flags or {})}, **kw})


def test_a_sibling_s_change_is_carried_onto_the_trial_kept_over_it():
    got = carry(BASE, _c({"--enable-chunked-prefill": False}), _c({"--kv-cache-dtype": "fp8"}))
    assert got.flags == {"--max-num-seqs": 128, "--enable-chunked-prefill": False, "--kv-cache-dtype": "fp8"}
    # a flag the sibling unset is unset on the kept trial too
    assert carry(BASE, _c().model_copy(update={"flags": {}}), _c({"--x": 1})).flags == {"--x": 1}


def test_nothing_is_carried_that_the_kept_trial_changed_itself_or_already_has():
    assert carry(BASE, _c({"--max-num-seqs": 64}), _c({"--max-num-seqs": 256})) is None  # both set it: kept's stays
    assert carry(BASE, _c({"--x": 1}), _c({"--x": 1, "--y": 2})) is None  # built on it: nothing lost
    assert carry(BASE, _c(weights="fp8"), _c(weights="mxfp4")) is None
    assert carry(BASE, _c(framework="sglang"), _c({"--x": 1})) is None  # another framework's flags mean nothing here


def test_tuned_moe_kernels_go_with_the_layout_they_were_tuned_on():
    tp4 = _c(parallel=Parallel(tp=4, dp=2), moe_configs=["tp4.json"])
    assert carry(BASE, tp4, _c({"--x": 1})) == _c({"--x": 1}, parallel=Parallel(tp=4, dp=2), moe_configs=["tp4.json"])
    # the kept trial has a layout of its own: neither the layout nor its kernels carry
    assert carry(BASE, tp4, _c(parallel=Parallel(tp=2, dp=4))) is None


VAR = frameworks.get("vllm").moe_config_env  # tools/moe.install sets it beside moe_configs


def test_the_variable_naming_tuned_kernels_goes_with_them():
    tuned = _c(parallel=Parallel(tp=4, dp=2), moe_configs=["/r/tp4.json"], env={VAR: "/r"})
    # the same layout proposed on another base before tuning (tools/moe.on_layout drops the variable)
    # is the same step: the parallel driver must see it walked twice
    assert change(BASE, tuned) == change(BASE, _c(parallel=Parallel(tp=4, dp=2))) == {"parallel": tuned.parallel.model_dump()}
    got = carry(BASE, tuned, _c({"--x": 1}))
    assert got.moe_configs == ["/r/tp4.json"] and got.env == {VAR: "/r"}
    assert _changes(_c({"--x": 1}), got) == "TP4 x DP2, MoE kernels tuned for TP4 x DP2"  # what a carry is called
    # kept tuned the base's layout, prev moved to another: the layout carries without kept's kernels
    here = _c({"--x": 1}, moe_configs=["/r/tp8.json"], env={VAR: "/r8", "OTHER": "1"})
    got = carry(BASE, _c(parallel=Parallel(tp=4, dp=2)), here)
    assert got.parallel == Parallel(tp=4, dp=2) and got.moe_configs == [] and got.env == {"OTHER": "1"}
    assert got.flags == here.flags


class TwoFlags:
    """The baseline, then two flags a and b (different flags) on the incumbent it is asked with, or
    the baseline while that is being measured; then nothing more."""
    name = "two-flags"

    def propose(self, ctx):
        n = len(ctx.trials)
        if n == 0:
            return BuiltinPlanner().propose(ctx)
        if n > 2:
            return Proposal(kind="stop", phase=ctx.phase, description="script done")
        inc = ctx.incumbent_candidate() or Candidate.model_validate(ctx.trials[0]["candidate"])
        flag = {1: {"--max-num-seqs": 64}, 2: {"--max-num-batched-tokens": 4096}}[n]
        return Proposal(kind="config", phase="flags", description="ab"[n - 1],
                        candidate=inc.model_copy(update={"flags": {**inc.flags, **flag}}))


class BothWin(Scripted):
    """a and b each clearly above the baseline, b below a; the two together above a."""
    VALUES = {(1, "candidate"): [(1000, 15)], (2, "candidate"): [(1200, 15)],
              (3, "candidate"): [(1150, 15)], (4, "candidate"): [(1380, 15)]}
    SLOW = {}


def test_a_sibling_that_won_on_the_base_but_not_over_the_trial_kept_before_it_is_carried_onto_it(tmp_path):
    rt, _ = drive(tmp_path, 4, trials=10, planner=TwoFlags(), executor=BothWin())
    t = {x["id"]: x for x in rt.ledger.trials()}
    assert [t[i]["verdict"] for i in (1, 2, 3, 4)] == ["kept", "kept", "reverted", "kept"], [x["reason"] for x in t.values()]
    assert t[3]["incumbent_id"] == 1  # b was built on the baseline beside a
    assert t[4]["incumbent_id"] == 2 and "trial 3" in t[4]["description"], t[4]["description"]
    assert t[4]["candidate"]["flags"] == {**t[2]["candidate"]["flags"], "--max-num-batched-tokens": 4096}
    assert rt.ledger.incumbent() == 4


def test_one_trial_at_a_time_never_gets_one(tmp_path):
    # b is built on a, and reverted against it: it never beat a base a kept trial lacks
    rt, _ = drive(tmp_path, 1, trials=10, planner=TwoFlags(), executor=BothWin())
    t = rt.ledger.trials()
    assert [x["verdict"] for x in t] == ["kept", "kept", "reverted"] and t[2]["incumbent_id"] == 2


class Trials:
    """A ledger's trials by id: only what Driver._walked reads."""
    def __init__(self, cands: dict):
        self.cands = cands

    def trial(self, tid):
        return {"candidate": self.cands[tid].model_dump(mode="json")}


def test_the_same_step_on_two_bases_waits_and_another_step_goes_out_at_once():
    from types import SimpleNamespace

    from agent.parallel import Driver, Open
    # trial 3 was kept over trial 2, while a layout (trial 4) and a flag (trial 5) ran ahead on 2
    cands = {2: _c({"--x": 1}), 3: _c({"--y": 1}), 4: _c({"--x": 1}, parallel=Parallel(tp=4, dp=2)),
             5: _c({"--x": 1, "--z": 1})}
    d = Driver(rt=SimpleNamespace(ledger=Trials(cands)), executor=None, workers=8)
    d.queue = [Open(4, "parallel", "config", base=2), Open(5, "parallel", "config", base=2)]
    on3 = lambda **kw: Proposal(kind="config", phase="parallel", description="", candidate=cands[3].model_copy(update=kw))  # noqa: E731
    assert d._walked(on3(parallel=Parallel(tp=4, dp=2)), 3)  # trial 4's step, on the new incumbent
    assert d._walked(on3(flags={**cands[3].flags, "--z": 1}), 3)  # trial 5's
    assert not d._walked(on3(parallel=Parallel(tp=2, dp=4)), 3)  # another layout: no reason to wait
    beside = Proposal(kind="config", phase="parallel", description="",
                      candidate=cands[2].model_copy(update={"parallel": Parallel(tp=2, dp=4)}))
    assert not d._walked(beside, 2)  # on trial 4's own base: a batch


class Ledger:
    """Trials as the ledger lists them: only what speculate.rebase reads (a kept-over sibling's
    carry needs no measurements)."""
    def __init__(self, rows: list):
        self.rows = [{"id": i, "incumbent_id": base, "candidate": c.model_dump(mode="json"), "verdict": v,
                      "status": "done" if v else "running", "reason_code": None} for i, base, c, v in rows]

    def trials(self):
        return self.rows


def test_a_carried_change_that_lost_on_its_own_base_is_not_carried_again():
    from agent.speculate import rebase
    a, b, c = {"--a": 1}, {"--b": 1}, {"--c": 1}
    rows = [(1, None, BASE, "kept"), (2, 1, _c(a), "kept"), (3, 1, _c(b), "kept"),  # 3 kept over 2: a dropped
            (4, 3, _c({**b, **a}), "reverted"),  # a carried onto 3: lost there, against 3 itself
            (5, 3, _c({**b, **c}), "kept")]
    assert rebase(Ledger(rows[:3]), 3, "flags", "knee", None).candidate == _c({**b, **a})
    assert rebase(Ledger(rows), 5, "flags", "knee", None) is None  # one trial at a time would not try a again
    rows[3] = (4, 3, _c({**b, **a}), "kept")
    rows[4] = (5, 4, _c({**b, **a, **c}), "kept")
    assert rebase(Ledger(rows), 5, "flags", "knee", None) is None  # kept: nothing lacks it


def test_a_carry_outrun_by_a_trial_kept_while_it_ran_is_carried_onto_that_one():
    from agent.speculate import rebase
    a, b, c = {"--a": 1}, {"--b": 1}, {"--c": 1}
    rows = [(1, None, BASE, "kept"), (2, 1, _c(a), "kept"), (3, 1, _c(b), "kept"),  # 3 kept over 2: a dropped
            (4, 3, _c({**b, **c}), "kept"),  # built on 3 beside the carry below, and kept first
            (5, 3, _c({**b, **a}), "reverted")]  # a carried onto 3, decided against 4: outrun, not beaten
    assert rebase(Ledger(rows), 4, "flags", "knee", None).candidate == _c({**b, **c, **a})


def test_a_carry_superseded_on_its_own_base_is_carried_onto_the_trial_that_superseded_it():
    from agent.speculate import rebase
    a, b, c = {"--a": 1}, {"--b": 1}, {"--c": 1}
    rows = [(1, None, BASE, "kept"), (2, 1, _c(a), "kept"), (3, 1, _c(b), "kept"),  # 3 kept over 2: a dropped
            (4, 3, _c({**b, **a}), "reverted"),  # a carried onto 3, still repeating when 5 was kept clearly above
            (5, 3, _c({**b, **c}), "kept")]
    led = Ledger(rows)
    led.rows[3]["reason_code"] = "superseded"  # never judged against 3: not a loss
    assert rebase(led, 5, "flags", "knee", None).candidate == _c({**b, **c, **a})
    led.rows[3]["reason_code"] = "no_gain"  # lost against 3 itself: one trial at a time would not try a again
    assert rebase(led, 5, "flags", "knee", None) is None


def test_the_changes_the_incumbent_lacks_are_carried_onto_it_in_one_trial_then_one_at_a_time():
    from agent.speculate import rebase
    a, b, c = {"--a": 1}, {"--b": 1}, {"--c": 1}
    rows = [(1, None, BASE, "kept"), (2, 1, _c(a), "kept"), (3, 1, _c(b), "kept"),  # 3 kept over 2: a dropped
            (4, 1, _c(c), "kept")]  # 4 kept over 3: b dropped too
    p = rebase(Ledger(rows), 4, "flags", "knee", None)
    assert p.candidate == _c({**c, **a, **b}) and "trials 2, 3" in p.description  # as one trial at a time adds them up
    rows.append((5, 4, _c({**c, **a, **b}), "reverted"))  # together they lost: each goes on its own, in order
    assert rebase(Ledger(rows), 4, "flags", "knee", None).candidate == _c({**c, **a})


def test_a_trial_kept_over_one_built_on_an_older_base_gets_that_one_s_own_change():
    from agent.speculate import rebase
    x, y, z = {"--x": 1}, {"--y": 1}, {"--z": 1}
    rows = [(1, None, BASE, "kept"), (2, 1, _c(x), "kept"),
            (3, 1, _c(y), "kept"),  # sent beside 2 on the baseline, kept over it
            (4, 2, _c({**x, **z}), "kept")]  # built on 2, kept over 3
    # 3's own change is y (over the baseline); over 4's base it would also undo x, which 4 keeps
    assert rebase(Ledger(rows), 4, "flags", "knee", None).candidate == _c({**x, **z, **y})
