"""run_trial without the graph or a ledger: the fake ground (tests/agent/fakes.py), a
MemoryRecorder, and the verdicts with their reason codes; a trial killed between the two halves
of a repeat finishes that repeat before deciding again."""
from agent.config import Gate, resolve_target
from agent.decide import decide
from agent.trial import MemoryRecorder, TrialEnv, run_trial
from tests.agent.conftest import small_config
from tests.agent.fakes import FakeSandbox, FakeSuite
from tools import frameworks
from tools.candidate import Candidate

VLLM = Candidate(framework="vllm")
SGLANG = Candidate(framework="sglang")


def env(tmp_path, **cfg):
    config = small_config(**cfg)
    card, hw = resolve_target(config.target)
    sb = FakeSandbox(card, hw)
    lines: list[str] = []
    e = TrialEnv(sandbox=sb, run_dir=tmp_path, config=config, hw=hw, suite=FakeSuite(),
                 adapter=lambda fw: frameworks.get(fw), progress=lines.append)
    return e, sb, lines


def baseline(tmp_path) -> list[dict]:
    e, sb, _ = env(tmp_path)
    rec = MemoryRecorder()
    r = run_trial(e, 1, VLLM, None, rec)
    assert (r.verdict, r.code) == ("kept", "baseline"), r
    # one launch: the evals ran in the session that measured the baseline
    assert [c.framework for _, c in sb.launches] == ["vllm"]
    assert rec.outcome == "launched" and len(rec.rows) == 1 and set(rec.rows[0][1]["evals"]) == {"gsm8k", "long_context"}
    return [d for _, d, _, _ in rec.rows]


def test_baseline_then_an_eval_regression(tmp_path):
    inc = baseline(tmp_path)
    e, sb, _ = env(tmp_path)
    rec = MemoryRecorder(incumbent=inc)
    r = run_trial(e, 2, Candidate(framework="atom"), VLLM, rec)
    assert (r.verdict, r.code) == ("reverted", "eval_regression"), r
    assert r.numbers["evals"]["long_context"]["non_inferior"] is False
    assert len(sb.launches) == 1  # performance passed, so the evals ran in the same session


def test_a_launch_failure_is_a_failed_trial_with_its_diagnosis(tmp_path):
    e, _, lines = env(tmp_path)
    rec = MemoryRecorder()
    r = run_trial(e, 1, Candidate(framework="vllm", weights="mxfp4"), None, rec)
    assert (r.verdict, r.code) == ("failed", "launch_failed") and r.reason.startswith("launch failed: ")
    assert rec.outcome == "launch_failed" and rec.diagnoses and not rec.rows
    assert any(x.startswith("  launch failed: ") for x in lines)


def decided(e, rec) -> tuple[str, str]:
    """The rule applied again to what the recorder holds: the verdict a trial must end with."""
    v = decide(*rec.series(), e.config.objective, e.config.gate)
    return {"keep": "kept", "revert": "reverted"}[v.decision], v.code


def test_a_gain_within_noise_repeats_both_sides_interleaved(tmp_path):
    inc = baseline(tmp_path)
    e, sb, lines = env(tmp_path, gate=Gate(clear_mult=1000.0))  # no gain is clear in one shot
    rec = MemoryRecorder(incumbent=inc)
    r = run_trial(e, 2, SGLANG, VLLM, rec)
    roles = [role for role, *_ in rec.rows]
    k = roles.count("incumbent")
    assert k >= 1 and roles == ["candidate"] + ["incumbent", "candidate"] * k
    assert [c.framework for _, c in sb.launches][:2 * k + 1] == ["sglang"] + ["vllm", "sglang"] * k
    assert (r.verdict, r.code) == decided(e, rec) and r.code != "within_noise"
    assert any(x.startswith("  repeat: ") for x in lines)
    assert r.ground_s == sum(g for *_, g in rec.rows) and r.ground_s > 0


def test_killed_between_the_halves_of_a_repeat_it_measures_the_candidate_first(tmp_path):
    inc = baseline(tmp_path)
    e, _, _ = env(tmp_path, gate=Gate(clear_mult=1000.0))
    first = MemoryRecorder(incumbent=inc)
    run_trial(e, 2, SGLANG, VLLM, first)
    assert [role for role, *_ in first.rows][:2] == ["candidate", "incumbent"]
    # What a kill after the repeat's incumbent launch leaves: the candidate's first, the incumbent's repeat.
    rec = MemoryRecorder(incumbent=inc, rows=first.rows[:2])
    e2, sb2, lines = env(tmp_path, gate=Gate(clear_mult=1000.0))
    r = run_trial(e2, 2, SGLANG, VLLM, rec)
    assert sb2.launches[0][1].framework == "sglang" and lines[0] == "  launching sglang (candidate) ..."
    assert [role for role, *_ in rec.rows][:3] == ["candidate", "incumbent", "candidate"]
    assert (r.verdict, r.code) == decided(e2, rec)


def test_a_repeat_that_settles_the_gain_runs_the_evals_in_its_own_session(tmp_path):
    # the eval gate is next once the repeat's candidate side is measured: evals in that launch,
    # not in a launch of their own (on a real node every launch is minutes of loading)
    inc = baseline(tmp_path)
    e, sb, _ = env(tmp_path, gate=Gate(clear_mult=1000.0))
    rec = MemoryRecorder(incumbent=inc)
    r = run_trial(e, 2, Candidate(framework="sglang", weights="mxfp4"), VLLM, rec)  # +65%: clear after one repeat
    assert r.code == "gain_evals_pass" and len(rec.rows) == 3, r
    roles = [role for role, *_ in rec.rows]
    assert len(sb.launches) == len(rec.rows) and roles[-1] == "candidate"
    assert rec.rows[-1][1]["evals"] and not any(d.get("evals") for _, d, *_ in rec.rows[:-1])
