"""Replay through the real loop on the fake ground: same best in a third of the trials, the MTP
patch re-rendered for DeepSeek's layer 61, ROCm/MTP steps skipped with reasons on NVIDIA."""
import subprocess
from pathlib import Path

import git
import pytest
import yaml

from agent.playbooks import schema as pbm
from agent.run import start
from agent.playbooks.replay import planner_for_run
from agent.replay import replay
from agent.playbooks.replay import ReplayPlanner
from tests.agent.fakes import FakeSandbox
from agent.ledger import Ledger
from tests.agent.conftest import fake_factory, fake_suite
from tests.playbooks.conftest import config, config_of, do_replay


def test_recorded_playbook_is_valid_and_templated(recorded):
    pb = pbm.load(recorded.playbook)
    assert pb.source.trials == recorded.launched and pb.steps[0].baseline
    kinds = [s.kind for s in pb.steps]
    assert kinds[:3] == ["framework", "framework", "weights"] and "moe_tune" in kinds and "patch" in kinds
    mtp = [p for s in pb.steps for p in s.patches if p.fix == "mtp_prefix_alias"]
    assert mtp and mtp[0].params == {"layer": "{num_hidden_layers}"} and mtp[0].when.after_diagnosis == "shape_mismatch"
    guard = [p for s in pb.steps for p in s.patches if p.fix == "rocm_include_guard"]
    assert guard and guard[0].when.vendor == ["amd"] and guard[0].diff is None
    par = next(s for s in pb.steps if s.kind == "parallel")
    assert par.parallel.tp == "{gpus_per_node//2}" and par.parallel.dp == 2
    text = recorded.playbook.read_text()
    assert str(recorded.run_dir) not in text and "moe_configs" not in text  # nothing run-specific
    assert all(s.evidence.reason for s in pb.steps)


def test_replay_same_model_same_best_in_a_third_of_the_trials(recorded, tmp_path):
    out = do_replay(recorded.playbook, "glm-5.2", "mi355x", tmp_path / "r")
    assert out["status"] == "done"
    assert config_of(out["best"]) == config_of(recorded.out["best"])
    assert out["launched"] * 3 <= recorded.launched, (out["launched"], recorded.launched)
    assert {o["outcome"] for o in out["steps"]} == {"carried"}
    # The new playbook records the replay, step by step; the report says what carried over.
    new = pbm.load(tmp_path / "r" / "playbook.yaml")
    assert new.replayed_from == "glm-5.2-mi355x" and [c.step for c in new.carried] == [s.id for s in pbm.load(recorded.playbook).steps]
    md = (tmp_path / "r" / "report.md").read_text()
    assert "## Playbook replay" in md and "carried over with the patch re-rendered" in md
    # On the model and node it was recorded on, a patch whose defect is still in the tree goes in with
    # its step at once: no launch re-watches the failure the recording already saw here.
    trials = Ledger(tmp_path / "r").trials()
    assert not [t["id"] for t in trials if t["outcome"] == "launch_failed"]
    patched = [t for t in trials if t["kind"] == "patch"]
    assert len(patched) == 2 and all(t["proposal"]["fixes_trial"] is None and "defect it fixes is in this tree"
                                     in t["rationale"] for t in patched)


def test_a_defect_fixed_upstream_is_not_patched_again(recorded, tmp_path):
    """The same replay on a tree where both defects are already fixed (the fix templates then do not
    render): each patch step launches without its patch and carries over without it."""
    from agent.planners import fixes

    class FixedUpstream(FakeSandbox):
        def source_tree(self, framework, run_dir):
            fresh = not (Path(run_dir) / "src" / framework).exists()
            t = super().source_tree(framework, run_dir)
            if fresh:
                for fx in (fixes.mtp_prefix_patch(t, self.card.num_hidden_layers),
                           fixes.rocm_guard_patch(t, "sgl-kernel/csrc/spec/multi_step_metadata.cuh", None, "cuda_runtime.h")):
                    subprocess.run(["git", "apply"], cwd=t, input=fx.diff, text=True, check=True)
                r = git.Repo(t)
                r.git.add("-A")
                r.git.commit("-m", "upstream fix", env={"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x",
                                                        "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"})
            return t

    rd = tmp_path / "r"
    out = replay(recorded.playbook, config(), rd, sandbox_factory=lambda cfg, card, hw: FixedUpstream(card, hw),
                 suite_factory=fake_suite)
    assert out["status"] == "done" and not Ledger(rd).patches()
    pb = pbm.load(recorded.playbook)
    by = {o["step"]: o for o in out["steps"]}
    for s in (s for s in pb.steps if s.patches):
        assert by[s.id]["outcome"] == "carried" and "without the patch" in by[s.id]["reason"], by[s.id]


def test_replay_on_deepseek_adapts_the_mtp_patch_to_layer_61(recorded, tmp_path):
    out = do_replay(recorded.playbook, "deepseek-v3", "mi355x", tmp_path / "r")
    led = Ledger(tmp_path / "r")
    mtp = [p for p in led.patches() if p["fix"] == "mtp_prefix_alias"]
    assert len(mtp) == 1 and mtp[0]["status"] == "approved"
    assert '"model.layers.61.eh_proj": "model.eh_proj"' in mtp[0]["diff"]
    assert "model.layers.78" not in mtp[0]["diff"]
    # It was proposed only after the failure the recorded run had seen first.
    t = next(t for t in led.trials() if t["patch_id"] == mtp[0]["id"])
    assert led.trial(t["proposal"]["fixes_trial"])["diagnoses"][0]["kind"] == "shape_mismatch"
    assert sum("Inferloop-Patch:" in c.message for c in git.Repo(tmp_path / "r" / "src" / "sglang").iter_commits()) >= 2
    assert out["status"] == "done"


@pytest.mark.slow
def test_replay_on_deepseek_reaches_90pct_of_a_full_run_in_fewer_trials(recorded, tmp_path):
    out = do_replay(recorded.playbook, "deepseek-v3", "mi355x", tmp_path / "r")
    full = start(config("deepseek-v3", "mi355x"), tmp_path / "full", sandbox_factory=fake_factory(),
                 suite_factory=fake_suite)
    full_n = Ledger(tmp_path / "full").launched_count()
    assert out["best"]["knee_tok_s"] >= 0.9 * full["best"]["knee_tok_s"]
    assert out["launched"] < full_n


def test_replay_on_qwen_b200_skips_rocm_and_mtp_steps_with_reasons(recorded, tmp_path):
    out = do_replay(recorded.playbook, "qwen3-235b-a22b", "b200", tmp_path / "r")
    assert out["status"] == "done" and out["best"]
    pb = pbm.load(recorded.playbook)
    by = {o["step"]: o for o in out["steps"]}
    for s in pb.steps:
        fixes = {p.fix for p in s.patches}
        if "mtp_prefix_alias" in fixes or s.when.has_mtp:
            assert by[s.id]["outcome"] == "skipped" and "no MTP" in by[s.id]["reason"], by[s.id]
        if "rocm_include_guard" in fixes:
            assert by[s.id]["outcome"] == "skipped" and "b200 is nvidia" in by[s.id]["reason"], by[s.id]
        if s.when.vendor == ["amd"] and not s.patches:
            assert by[s.id]["outcome"] == "skipped" and "nvidia" in by[s.id]["reason"]
    led = Ledger(tmp_path / "r")
    assert not led.patches()  # no MTP fix, no ROCm guard was even proposed
    md = (tmp_path / "r" / "report.md").read_text()
    assert "no MTP (NextN) draft layers" in md


def test_tampered_playbook_is_refused_before_anything_runs(recorded, tmp_path):
    data = yaml.safe_load(recorded.playbook.read_text())
    step = next(s for s in data["steps"] if s.get("patches"))
    step["patches"][0]["params"]["layer"] = 61
    step["patches"].append({"framework": "sglang", "fix": "literal",
                            "diff": "--- a/../../etc/passwd\n+++ b/../../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n"})
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(pbm.PlaybookError, match=r"steps\[\d+\]\.patches\[1\]\.diff.*'\.\.'"):
        do_replay(bad, "glm-5.2", "mi355x", tmp_path / "r")
    assert not (tmp_path / "r").exists()


def test_a_replay_waiting_for_review_resumes_as_a_replay(recorded, tmp_path):
    """Non-interactive ask mode stops at the first patch; after a human approves, running the same
    replay on the same run directory continues it with the replay planner, nothing re-run."""
    rd = tmp_path / "r"
    out = do_replay(recorded.playbook, "deepseek-v3", "mi355x", rd, approve="ask")
    assert out["status"] == "waiting_for_review"
    assert out["waiting"]["how"][-1].startswith("agent replay ") and str(rd) in out["waiting"]["how"][-1]
    led = Ledger(rd)
    before = led.launched_count()
    pid = out["waiting"]["patch"]
    assert led.patch(pid)["fix"] == "mtp_prefix_alias" and "model.layers.61.eh_proj" in led.patch(pid)["diff"]
    led.decide_patch(pid, "approved", by="human:test")
    for p in range(3):  # the ROCm guard comes next; approve each patch as it is asked for
        out = do_replay(recorded.playbook, "deepseek-v3", "mi355x", rd, approve="ask")
        if out["status"] != "waiting_for_review":
            break
        led.decide_patch(out["waiting"]["patch"], "approved", by="human:test")
    assert out["status"] == "done"
    trials = led.trials()
    # A new model: the framework comparison runs right after the baseline, then only playbook steps.
    assert [t["phase"] for t in trials[1:3]] == ["framework"] * 2 and "re-checked here" in trials[1]["rationale"]
    assert all(t["description"].startswith("[playbook s") for t in trials[:1] + trials[3:]), [t["description"] for t in trials]
    assert len({t["candidate"] and repr(t["candidate"]) for t in trials}) == len(trials)  # nothing measured twice
    assert led.launched_count() > before
    # The recorded framework step found its framework already chosen by the re-check; the rest carried.
    fw_step = next(s.id for s in pbm.load(recorded.playbook).steps if s.kind == "framework" and not s.baseline)
    assert {o["step"]: o["outcome"] for o in out["steps"] if o["outcome"] != "carried"} == {fw_step: "skipped"}
    assert isinstance(planner_for_run(rd), ReplayPlanner) and planner_for_run(recorded.run_dir) is None


def test_a_literal_diff_through_a_symlink_in_the_new_tree_is_refused_before_anything_runs(recorded, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()

    class LinkedTree(FakeSandbox):
        def source_tree(self, framework, run_dir):
            t = super().source_tree(framework, run_dir)
            if not (t / "vendor").exists():
                (t / "vendor").symlink_to(outside)
            return t

    data = yaml.safe_load(recorded.playbook.read_text())
    data["steps"].append({"id": "s99", "kind": "patch", "phase": "speculative", "patches": [
        {"framework": "sglang", "fix": "literal", "diff": "--- a/vendor/x.py\n+++ b/vendor/x.py\n@@ -0,0 +1 @@\n+pwned\n"}]})
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(data))
    pbm.load(bad)  # path-level checks pass: the escape is only visible against the tree
    rd = tmp_path / "r"
    with pytest.raises(pbm.PlaybookError, match=r"steps\[\d+\]\.patches\.diff: path 'vendor/x.py' resolves to .*outside the source tree"):
        replay(bad, config(), rd, sandbox_factory=lambda cfg, card, hw: LinkedTree(card, hw), suite_factory=fake_suite)
    assert not rd.exists() and not any(outside.iterdir())


def test_a_step_this_framework_cannot_express_hands_its_phase_to_the_builtin_planner(tmp_path):
    pb = pbm.parse({"version": 1, "name": "hand-made", "source": {"model": "glm-5.2", "hw": "mi355x"}, "steps": [
        {"id": "s01", "kind": "framework", "phase": "framework", "baseline": True, "framework": "sglang",
         "weights": "mxfp4", "parallel": {"tp": "{gpus_per_node}", "dp": 1}},
        {"id": "s02", "kind": "flags", "phase": "speculative", "flags": {"--method": "mtp", "--num-speculative-tokens": 3},
         "when": {"has_mtp": True}},  # ATOM's spelling: sglang has no such flags
        {"id": "s03", "kind": "flags", "phase": "flags", "flags": {"--kv-cache-dtype": "fp8_e4m3"}}]})
    rd = tmp_path / "r"
    out = do_replay(pb, "glm-5.2", "mi355x", rd)
    by = {o["step"]: o for o in out["steps"]}
    assert by["s02"]["outcome"] == "failed" and "--method" in by["s02"]["reason"] and "handed over" in by["s02"]["reason"]
    trials = Ledger(rd).trials()
    s03 = next(i for i, t in enumerate(trials) if t["description"].startswith("[playbook s03]"))
    handed = [t for t in trials[1:s03] if not t["description"].startswith("[playbook")]
    # The built-in planner worked the speculative phase (its fix catalogue included) before s03 ran.
    assert handed and all(t["phase"] == "speculative" for t in handed)
    assert {p["fix"] for p in Ledger(rd).patches()} == {"mtp_prefix_alias", "rocm_include_guard"}
    assert by["s03"]["outcome"] in ("carried", "reverted") and out["status"] == "done"
    assert any("a playbook step failed in phase speculative" in t["rationale"] for t in handed)


def test_agent_resume_of_a_replay_keeps_replaying(recorded, tmp_path):
    from agent.run import resume
    fresh = tmp_path / "w"
    out = do_replay(recorded.playbook, "glm-5.2", "mi355x", fresh, approve="ask")
    assert out["status"] == "waiting_for_review"
    Ledger(fresh).decide_patch(out["waiting"]["patch"], "rejected", by="human:test", reason="not on this node")
    out = resume(fresh, sandbox_factory=fake_factory(), suite_factory=fake_suite, approve="never")
    assert out["status"] == "done"
    trials = Ledger(fresh).trials()
    # Every trial up to the rejected patch's step is the playbook's; the rejection hands that phase over.
    first = [t for t in trials if t["phase"] in ("framework", "precision")]
    assert first and all(t["description"].startswith("[playbook s") for t in first)
    assert any(t["description"].startswith("[playbook s") and t["phase"] in ("parallel", "moe") for t in trials)


def test_a_step_that_only_refines_a_step_which_did_not_carry_is_skipped():
    """A deeper MTP draft is moot once MTP itself was reverted: its flags change nothing alone."""
    from agent.playbooks.adapt import adapt
    from tools.candidate import Candidate
    from tools.hardware import get_hardware
    from tools.models import get_model
    pb = pbm.parse({"version": 1, "name": "hand-made", "steps": [
        {"id": "s01", "kind": "framework", "phase": "framework", "baseline": True, "framework": "sglang"},
        {"id": "s02", "kind": "flags", "phase": "speculative",
         "flags": {"--speculative-algorithm": "NEXTN", "--speculative-num-steps": 3}},
        {"id": "s03", "kind": "flags", "phase": "speculative", "flags": {"--speculative-num-steps": 5}},
        {"id": "s04", "kind": "flags", "phase": "flags", "flags": {"--max-running-requests": 64}}]})
    card, hw = get_model("glm-5.2"), get_hardware("mi355x")
    rp = ReplayPlanner(pb)
    s03, s04 = pb.steps[2], pb.steps[3]
    stock = Candidate(framework="sglang")
    assert "refines s02 (--speculative-num-steps)" in rp._refines_uncarried(s03, adapt(s03, card, hw), stock)
    mtp = stock.model_copy(update={"flags": {"--speculative-algorithm": "NEXTN", "--speculative-num-steps": 3}})
    assert rp._refines_uncarried(s03, adapt(s03, card, hw), mtp) is None  # s02 carried: s03 is a real change
    assert rp._refines_uncarried(s04, adapt(s04, card, hw), stock) is None  # a flag of its own


def test_the_runs_base_flags_carry_under_the_recorded_steps(tmp_path):
    """`agent replay --config` takes base_flags as `agent optimize` does: every candidate starts from
    them (the recorded step's own value wins where both set a flag), a switch of framework too."""
    pb = pbm.parse({"version": 1, "name": "hand-made", "source": {"model": "glm-5.2", "hw": "mi355x"}, "steps": [
        {"id": "s01", "kind": "framework", "phase": "framework", "baseline": True, "framework": "vllm",
         "flags": {"--max-num-seqs": 8, "--max-model-len": 8192}},
        {"id": "s02", "kind": "flags", "phase": "flags", "flags": {"--max-num-seqs": 64}},
        {"id": "s03", "kind": "framework", "phase": "framework", "framework": "sglang"}]})
    rd = tmp_path / "r"
    base = {"--max-model-len": 4096, "--enforce-eager": True, "--mem-fraction-static": 0.8}
    replay(pb, config(base_flags=base), rd, sandbox_factory=fake_factory(), suite_factory=fake_suite)
    by = {t["description"].split("]")[0] + "]": t["candidate"] for t in Ledger(rd).trials()
          if t["description"].startswith("[playbook")}
    assert by["[playbook s01]"]["flags"] == {"--max-model-len": 8192, "--enforce-eager": True, "--max-num-seqs": 8}
    assert by["[playbook s02]"]["flags"]["--enforce-eager"] is True and by["[playbook s02]"]["flags"]["--max-num-seqs"] == 64
    # sglang's schema has --mem-fraction-static and no --enforce-eager: it starts from what it knows
    assert by["[playbook s03]"]["flags"].get("--mem-fraction-static") == 0.8 and "--enforce-eager" not in by["[playbook s03]"]["flags"]
