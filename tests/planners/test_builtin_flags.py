"""The built-in planner's flags phase, driven in memory against a made-up objective (no sandbox):
it does not spend launches that cannot pay. A numeric search that keeps losing is cut after
`patience` launches, a kept switch is not screened back to the value it beat, a flag that acts
only on another vendor's hardware is not tried, nor a switch that turns off what the workload relies
on (the prefix cache, when prompts share prefixes)."""
from agent.config import THROUGHPUT, RunConfig, Target
from agent.planners.base import PlanContext
from agent.planners.builtin import BuiltinPlanner
from tools.candidate import Candidate, Parallel
from tools.hardware import get_hardware
from tools.models import get_model

NUMERIC = ("--mem-fraction-static", "--max-running-requests", "--max-prefill-tokens", "--cuda-graph-max-bs")


def drive(hw: str, value, planner=None, limit=30, workload=None, framework="sglang", prose=True,
          versions=None) -> list[dict]:
    """Run the planner from a TP8 baseline in the flags phase; value(candidate, n) -> tok/s,
    n = launches so far. Keep rule: better by more than 2%. Returns the trial rows. prose=False
    records every rationale as "" (the planner must not need its own prose back)."""
    planner = planner or BuiltinPlanner()
    card, prof = get_model("glm-5.2"), get_hardware(hw)
    cfg = RunConfig(target=Target(model="glm-5.2", hw=hw))
    if workload is not None:
        cfg = cfg.model_copy(update={"measure": cfg.measure.model_copy(update={"workload": workload})})
    trials, inc, inc_v = [], None, None
    cand, phase, params, screen = Candidate(framework=framework, weights="fp8", parallel=Parallel(tp=8)), "flags", {}, None
    while len(trials) < limit:
        v = value(cand, len(trials))
        keep = inc_v is None or v > inc_v * 1.02
        tid = len(trials) + 1
        trials.append({"id": tid, "phase": phase, "kind": "config", "candidate": cand.model_dump(mode="json"),
                       "incumbent_id": inc, "proposal": {"params": params, "screen": screen}, "rationale": rationale if trials and prose else "",
                       "outcome": "launched", "verdict": "kept" if keep else "reverted", "diagnoses": [],
                       "reason": "", "reason_code": None, "value": v})
        if keep:
            inc, inc_v = tid, v
        meas = {t["id"]: [{"role": "candidate", "data": {"knee_tok_s": t["value"]}}] for t in trials}
        ctx = PlanContext(config=cfg, card=card, hw=prof, trials=trials, measurements=lambda i: meas[i],
                          incumbent_id=inc, frameworks=(framework,), source_tree=lambda fw: None,
                          versions=versions or {})
        p = planner.propose(ctx)
        if p.kind != "config":
            break
        cand, phase, params, rationale, screen = p.candidate, p.phase, p.params, p.rationale, p.screen
    return trials


def flat(c, n):  # nothing but fp8 KV helps
    return 100.0 * (1.5 if c.flags.get("--kv-cache-dtype") == "fp8_e4m3" else 1.0)


def searched(trials):
    return [t for t in trials if t["proposal"]["params"]]


def test_a_numeric_search_that_keeps_losing_is_cut_after_patience_launches():
    trials = drive("mi355x", flat)
    assert len(searched(trials)) == 3
    assert any(t["phase"] == "parallel" for t in trials)  # the launches went to the next phase instead
    assert len(searched(drive("mi355x", flat, BuiltinPlanner(patience=5)))) == 5


def test_points_outrun_by_a_trial_kept_while_they_ran_do_not_count_against_patience():
    """Side by side (agent/parallel.py), a point built on one incumbent may be decided against
    another kept while it ran (a layout run beside the flags phase): it lost to that, not to its own
    base, so it does not count as the search stalling."""
    trials = drive("mi355x", flat)
    cut = trials[:next(i for i, t in enumerate(trials) if t["phase"] != "flags")]
    assert len(searched(cut)) == 3
    ctx = lambda rows: PlanContext(  # noqa: E731
        config=RunConfig(target=Target(model="glm-5.2", hw="mi355x")), card=get_model("glm-5.2"),
        hw=get_hardware("mi355x"), trials=rows, measurements=lambda i: [{"role": "candidate", "data": {"knee_tok_s": 1.0}}],
        incumbent_id=max(t["id"] for t in rows if t["verdict"] == "kept"), frameworks=("sglang",),
        source_tree=lambda fw: None, at_phase="flags")
    assert not BuiltinPlanner().propose(ctx(cut)).params  # three losses on their own base: cut
    outrun = [{**t, "incumbent_id": 0} if t["proposal"]["params"] else t for t in cut]  # built on another
    assert BuiltinPlanner().propose(ctx(outrun)).params


def test_a_search_that_keeps_winning_runs_to_its_budget():
    def better_each_time(c, n):
        return flat(c, n) * (1.1 ** n if any(k in c.flags for k in NUMERIC) else 1.0)
    assert len(searched(drive("mi355x", better_each_time))) == 6  # search_trials, the cap


def test_a_kept_switch_is_not_screened_back_to_the_value_it_beat():
    def two_switches(c, n):  # a second switch kept after the first makes "first switch off" a new point
        return flat(c, n) * (1.1 if c.flags.get("--enable-aiter-allreduce-fusion") else 1.0)
    trials = drive("mi355x", two_switches)
    kept = next(i for i, t in enumerate(trials) if t["candidate"]["flags"].get("--kv-cache-dtype") == "fp8_e4m3")
    assert trials[kept]["verdict"] == "kept"
    later = [t for t in trials[kept + 1:] if t["phase"] == "flags"]
    assert later and all(t["candidate"]["flags"].get("--kv-cache-dtype") == "fp8_e4m3" for t in later)


def test_aiter_flags_are_tried_on_amd_only():
    aiter = "--enable-aiter-allreduce-fusion"
    assert any(aiter in t["candidate"]["flags"] for t in drive("mi355x", flat))
    for hw in ("h200", "b200"):
        assert not any(aiter in t["candidate"]["flags"] for t in drive(hw, flat))


def test_the_prefix_cache_is_not_switched_off_for_a_workload_that_shares_prefixes():
    off = "--disable-radix-cache"
    assert THROUGHPUT.prefix_hit > 0 and not any(off in t["candidate"]["flags"] for t in drive("mi355x", flat))
    unshared = THROUGHPUT.model_copy(update={"prefix_hit": 0.0})
    assert any(off in t["candidate"]["flags"] for t in drive("mi355x", flat, workload=unshared))


def test_a_default_on_switch_is_screened_off_with_its_no_form():
    from tools.frameworks import get
    unshared = THROUGHPUT.model_copy(update={"prefix_hit": 0.0})
    off = [t for t in drive("h200", flat, framework="vllm", workload=unshared)
           if t["candidate"]["flags"].get("--enable-prefix-caching") is False]
    assert len(off) == 1  # and never "on", which it is already
    assert "--no-enable-prefix-caching" in get("vllm").flag_args(off[0]["candidate"]["flags"])
    assert not any("--enable-prefix-caching" in t["candidate"]["flags"] for t in drive("h200", flat, framework="vllm"))


def test_a_losing_switch_is_screened_at_most_screen_choices_times_counted_from_structured_fields():
    for prose in (True, False):
        trials = drive("mi355x", flat, BuiltinPlanner(screen_choices=1), limit=40, prose=prose)
        screens = [t["proposal"]["screen"] for t in trials if t["proposal"].get("screen")]
        assert screens, "the flags phase screened nothing"
        lost = {s for s in screens if not any(t["proposal"].get("screen") == s and t["verdict"] == "kept"
                                              for t in trials)}
        assert lost and all(screens.count(s) == 1 for s in lost), (prose, screens)


def test_the_planner_searches_only_flags_the_sandboxes_version_has():
    from tools.frameworks import get, versions
    old, new = versions("sglang")[0], versions("sglang")[-1]
    proposed = {}
    for v in (old, new):
        trials = drive("mi355x", flat, versions={"sglang": v}, limit=40)
        flags = {f for t in trials for f in t["candidate"]["flags"]}
        assert flags and flags <= set(get("sglang", v).flags), (v, flags - set(get("sglang", v).flags))
        proposed[v] = flags
    # The two versions' schemas differ where the planner searches: each run tried a flag the other version lacks.
    assert proposed[old] - set(get("sglang", new).flags), proposed
