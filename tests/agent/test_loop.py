"""The whole loop on the fake ground (tests/agent/fakes.py): the story's steps, approval modes,
learning from rejections, and the run's outputs, all asserted from the ledger."""
import json

import git
import yaml

from agent.run import resume, start
from agent.ledger import Ledger
from tests.agent.conftest import fake_factory, fake_suite, small_config


def run(tmp_path, **cfg):
    d = tmp_path / "run"
    ask = cfg.pop("ask", None)
    kw = {"ask": ask} if ask else {}
    out = start(small_config(**cfg), d, sandbox_factory=fake_factory(), suite_factory=fake_suite, **kw)
    return d, out, Ledger(d)


def test_story_in_miniature(tmp_path):
    d, out, led = run(tmp_path)
    assert out["status"] == "done"
    trials = led.trials()
    by = lambda **w: [t for t in trials if all(t[k] == v for k, v in w.items())]
    # ATOM: faster, turned down by the paired eval gate on the long-context task.
    atom = [t for t in trials if t["candidate"]["framework"] == "atom"]
    assert atom and atom[0]["verdict"] == "reverted"
    assert atom[0]["reason"].startswith("eval regression: long_context")
    assert atom[0]["numbers"]["evals"]["long_context"]["non_inferior"] is False
    # MXFP4 kept only with the eval gate's numbers in its verdict.
    mx = [t for t in by(phase="precision") if t["candidate"]["weights"] == "mxfp4" and t["verdict"] == "kept"]
    assert mx and "evals:" in mx[0]["reason"] and "non-inferior" in mx[0]["reason"]
    assert set(mx[0]["numbers"]["evals"]) == {"gsm8k", "long_context"}
    # Both speculative-decoding failures were diagnosed and fixed by patches that went through review.
    fails = [t for t in by(phase="speculative", verdict="failed")]
    kinds = [t["diagnoses"][0]["kind"] for t in fails]
    assert "shape_mismatch" in kinds and "compile_error" in kinds
    patches = {p["fix"]: p for p in led.patches()}
    assert set(patches) == {"mtp_prefix_alias", "rocm_include_guard"}
    assert all(p["status"] == "approved" and p["decided_by"] == "policy:--approve auto" for p in patches.values())
    assert '"model.layers.78.eh_proj": "model.eh_proj"' in patches["mtp_prefix_alias"]["diff"]
    assert "+#ifdef USE_ROCM" in patches["rocm_include_guard"]["diff"]
    best = out["best"]
    assert sorted(best["patches"]) == sorted(p["id"] for p in patches.values())
    # MoE: the fallback warning was seen on the incumbent, then the tuner ran and the log names the config.
    moe = by(kind="moe_tune")
    assert moe and moe[0]["verdict"] == "kept"  # later ones retune layouts that lost untuned
    warned = led.trial(moe[0]["incumbent_id"])
    assert any(x["kind"] == "moe_default_config" for x in warned["diagnoses"])
    assert any(x["kind"] == "moe_tuned_config" for x in moe[0]["diagnoses"])
    assert best["moe_configs"] and best["env"]["SGLANG_MOE_CONFIG_DIR"]
    # The best beats the baseline and every verdict carries its reason.
    res = json.loads((d / "result.json").read_text())
    assert res["best"]["knee_tok_s"] > 1.5 * res["baseline"]["knee_tok_s"]
    assert all(t["reason"] for t in res["trials"])
    for f in ("report.md", "report.html", "launch.sh", "playbook.yaml", "frontier.png", "ttft.png", "trials.png"):
        assert (d / f).is_file(), f
    assert len(list((d / "patches").glob("*.diff"))) == 2
    pb = yaml.safe_load((d / "playbook.yaml").read_text())
    assert [s["phase"] for s in pb["steps"]][:3] == ["framework", "framework", "precision"]
    assert all(s["evidence"]["reason"] for s in pb["steps"])
    assert "SGLANG_MOE_CONFIG_DIR=" in (d / "launch.sh").read_text()
    # The source tree carries exactly the best's patches, as the agent's own commits.
    tree = git.Repo(d / "src" / "sglang")
    assert sum("Inferloop-Patch:" in c.message for c in tree.iter_commits()) >= 2


def test_approve_never_applies_nothing_and_says_what_it_skipped(tmp_path):
    d, out, led = run(tmp_path, approve="never")
    assert {p["status"] for p in led.patches()} == {"skipped"}
    assert {s["fix"] for s in out["patches_not_applied"]} == {"mtp_prefix_alias"}
    assert all(not t["candidate"]["patches"] for t in led.trials() if t["started"])
    tree = git.Repo(d / "src" / "sglang")
    assert not any("Inferloop-Patch" in c.message for c in tree.iter_commits())


def test_rejection_is_learned(tmp_path):
    asked = []

    def ask(p):
        asked.append(p["fix"])
        if p["fix"] == "mtp_prefix_alias":
            return {"status": "rejected", "by": "human:test", "reason": "wrong layer, do not touch the mapper"}
        return {"status": "approved", "by": "human:test"}

    d, out, led = run(tmp_path, approve="ask", ask=ask)
    assert asked.count("mtp_prefix_alias") == 1  # never proposed again after the rejection
    p = [x for x in led.patches() if x["fix"] == "mtp_prefix_alias"][0]
    assert p["status"] == "rejected" and p["reason"] == "wrong layer, do not touch the mapper"
    t = [x for x in led.trials() if x["patch_id"] == p["id"]][0]
    assert t["verdict"] == "rejected" and "wrong layer" in t["reason"] and t["started"] is None
    assert out["status"] == "done"


def test_ask_without_a_human_waits_then_resumes_after_approve(tmp_path):
    d, out, led = run(tmp_path, approve="ask")  # no TTY in tests, no ask callback
    assert out["status"] == "waiting_for_review"
    pid = out["waiting"]["patch"]
    assert led.patch(pid)["status"] == "pending"
    tree = git.Repo(d / "src" / "sglang")
    assert not any("Inferloop-Patch" in c.message for c in tree.iter_commits())  # nothing applied yet
    n_before = len(led.trials())
    led.decide_patch(pid, "approved", by="human:test")
    out2 = resume(d, sandbox_factory=fake_factory(), suite_factory=fake_suite,
                  ask=lambda p: {"status": "approved", "by": "human:test"})
    assert out2["status"] == "done" and len(Ledger(d).trials()) > n_before
    assert Ledger(d).patch(pid)["status"] == "approved"
    assert any(f"Inferloop-Patch: {pid}" in c.message for c in git.Repo(d / "src" / "sglang").iter_commits())


def test_budget_stops_the_run(tmp_path):
    d, out, led = run(tmp_path, budget={"trials": 5})
    assert led.launched_count() == 5 and "trial budget of 5" in out["stop_reason"]


def test_base_flags_start_every_candidate_that_knows_them(tmp_path):
    d, out, led = run(tmp_path, budget={"trials": 3}, base_flags={"--enforce-eager": True, "--max-model-len": 4096})
    fw = {t["candidate"]["framework"]: t["candidate"]["flags"] for t in led.trials()}
    assert fw["vllm"] == {"--enforce-eager": True, "--max-model-len": 4096}
    assert fw["atom"] == {"--enforce-eager": True, "--max-model-len": 4096}
    assert fw["sglang"] == {}  # sglang has neither flag: it starts from its defaults


def test_spec_decoding_candidates_are_valid_for_every_framework():
    from agent.planners.spec_flags import spec_flag_sets
    from tools import frameworks
    from tools.candidate import Candidate
    for name in frameworks.NAMES:
        fw = frameworks.get(name)
        for mtp in (True, False):
            for flags, _ in spec_flag_sets(fw, mtp):
                c = Candidate(framework=name, flags=flags)  # JSON-typed flags (vLLM's) included
                fw.validate(c)
                assert Candidate.model_validate(c.model_dump(mode="json")).key() == c.key()


def test_eval_tasks_pick_a_subset_of_the_default_suite():
    from agent.run import default_suite
    from agent.config import Measure, RunConfig, Target
    from tools.models import get_model
    cfg = RunConfig(target=Target(model="smollm2-135m", hw="cpu"), measure=Measure(eval_tasks=["qa", "longctx"]))
    suite = default_suite(cfg, get_model("smollm2-135m"), None, object())
    assert [t.name for t in suite.tasks] == ["longctx", "qa"]
    assert suite.tasks[0].context_tokens == min(20000, int((8192 - 16 - 64) * 0.8))  # inside the 8k window
