"""Issue 13 item 1: env variables and code-loading flags are reviewed like patches. A planner
(here a scripted one standing for the LLM or a playbook) that proposes LD_PRELOAD, PYTHONPATH or a
flag that loads code gets a review record; nothing launches until a human approves it, the
--approve policy decides it when set, and a rejected item never launches."""
from pathlib import Path

import pytest
import yaml

from agent.run import resume, start
from agent.replay import replay
from agent.ledger import Ledger
from agent.planners.base import PlanContext, Proposal
from agent.review_gate import REVIEW_FIX
from tests.agent.conftest import fake_factory, fake_suite, small_config
from tests.playbooks.samples import valid
from tools.candidate import Candidate
from tools.code_review import risky_items

EVIL = {"LD_PRELOAD": "/tmp/evil.so", "PYTHONPATH": "/tmp/evil"}


class ScriptedPlanner:
    """Baseline vllm, then one config per entry of `changes` on top of the incumbent, then stop."""
    name = "scripted"

    def __init__(self, changes: list[dict]):
        self.changes = changes

    def propose(self, ctx: PlanContext) -> Proposal:
        n = len(ctx.trials)
        if n == 0:
            return Proposal(kind="config", phase="framework", description="baseline",
                            candidate=Candidate(framework="vllm", parallel={"tp": 8}))
        if n > len(self.changes):
            return Proposal(kind="stop", phase="flags", description="script done")
        base = ctx.incumbent_candidate() or Candidate(framework="vllm", parallel={"tp": 8})
        ch = self.changes[n - 1]
        c = base.model_copy(update={"env": {**base.env, **ch.get("env", {})},
                                    "flags": {**base.flags, **ch.get("flags", {})}})
        return Proposal(kind="config", phase="flags", description=f"step {n}", candidate=c)


def _run(tmp_path, changes, approve="ask", **kw):
    factory = fake_factory()
    out = start(small_config(approve=approve, **kw), tmp_path / "run", sandbox_factory=factory,
                suite_factory=fake_suite, planner=ScriptedPlanner(changes))
    return out, factory


def _launched_env(factory):
    return [c.env for s in factory.made for _, c in s.launches]


def test_risky_items_pure():
    c = Candidate(framework="vllm", env={"NCCL_DEBUG": "WARN", "LD_PRELOAD": "/x.so", "VLLM_PLUGINS": "a",
                                         "SGLANG_MOE_CONFIG_DIR": "/cfg", "OMP_NUM_THREADS": "4"},
                  flags={"--max-num-seqs": 64, "--kv-cache-dtype": "fp8", "--trust-remote-code": True,
                         "--model-loader-extra-config": {"x": 1}, "--speculative-config": {"method": "mtp"},
                         "--compilation-config": {"inductor": {"module": "evil.mod"}},
                         "--load-format": "evil.loaders:Loader", "--tokenizer": "/t/hook.py"})
    keys = [k for k, _ in risky_items(c)]
    assert [k.split("=")[0] for k in keys] == [
        "env LD_PRELOAD", "env VLLM_PLUGINS", "flag --compilation-config", "flag --load-format",
        "flag --model-loader-extra-config", "flag --tokenizer", "flag --trust-remote-code"]


def test_env_waits_for_review_and_never_launches_unapproved(tmp_path, agent):
    out, factory = _run(tmp_path, [{"env": EVIL}])
    assert out["status"] == "waiting_for_review"
    pid = out["waiting"]["patch"]
    assert pid.endswith(REVIEW_FIX)
    assert all("LD_PRELOAD" not in e for e in _launched_env(factory))
    r = agent("approvals", str(tmp_path / "run"))
    assert r.returncode == 0 and "env LD_PRELOAD=" in r.stdout and "PYTHONPATH" in r.stdout
    assert agent("approve", str(tmp_path / "run"), pid).returncode == 0
    factory2 = fake_factory()
    out = resume(tmp_path / "run", sandbox_factory=factory2, suite_factory=fake_suite,
                 planner=ScriptedPlanner([{"env": EVIL}]))
    assert out["status"] == "done"
    assert any(e.get("LD_PRELOAD") == "/tmp/evil.so" for e in _launched_env(factory2))  # approved: it runs


def test_rejected_env_is_never_launched_and_not_asked_twice(tmp_path, agent):
    out, _ = _run(tmp_path, [{"env": EVIL}, {"env": EVIL, "flags": {"--max-num-seqs": 32}}])
    pid = out["waiting"]["patch"]
    assert agent("reject", str(tmp_path / "run"), pid, "--reason", "no preloads").returncode == 0
    factory = fake_factory()
    out = resume(tmp_path / "run", sandbox_factory=factory, suite_factory=fake_suite,
                 planner=ScriptedPlanner([{"env": EVIL}, {"env": EVIL, "flags": {"--max-num-seqs": 32}}]))
    assert out["status"] == "done"
    assert all("LD_PRELOAD" not in e for e in _launched_env(factory))
    led = Ledger(tmp_path / "run")
    reviews = [p for p in led.patches() if p["fix"] == REVIEW_FIX]
    assert [p["status"] for p in reviews] == ["rejected", "rejected"]
    assert reviews[1]["decided_by"].startswith("policy:rejected earlier")


@pytest.mark.parametrize("approve,status", [("never", "skipped"), ("auto", "approved")])
def test_explicit_policy_decides(tmp_path, approve, status):
    out, factory = _run(tmp_path, [{"flags": {"--trust-remote-code": True}}], approve=approve)
    assert out["status"] == "done"
    led = Ledger(tmp_path / "run")
    assert [p["status"] for p in led.patches()] == [status]
    ran = any("--trust-remote-code" in c.flags for s in factory.made for _, c in s.launches)
    assert ran == (approve == "auto")


def test_base_flags_the_user_wrote_need_no_review(tmp_path):
    out, factory = _run(tmp_path, [], base_flags={"--trust-remote-code": True})
    led = Ledger(tmp_path / "run")
    assert out["status"] == "done" and not led.patches()


def test_playbook_env_step_is_reviewed_on_replay(tmp_path):
    d = valid()
    d["steps"] = [d["steps"][0], {**d["steps"][5], "kind": "env", "env": {"LD_PRELOAD": "/tmp/evil.so"}}]
    f = tmp_path / "pb.yaml"
    f.write_text(yaml.safe_dump(d))
    factory = fake_factory()
    out = replay(f, small_config(approve="ask"), tmp_path / "run", sandbox_factory=factory, suite_factory=fake_suite)
    assert out["status"] == "waiting_for_review" and out["waiting"]["patch"].endswith(REVIEW_FIX)
    assert all("LD_PRELOAD" not in c.env for s in factory.made for _, c in s.launches)


def test_launch_refuses_unreviewed_settings_even_if_a_trial_skips_the_gate(tmp_path):
    """Defence in depth: the last step before every launch checks the approvals again."""
    from agent import nodes, review_gate
    out, factory = _run(tmp_path, [])
    led = Ledger(tmp_path / "run")
    rt = nodes.Runtime(config=small_config(), run_dir=Path(tmp_path / "run"), ledger=led, sandbox=factory.made[0],
                       planner=None, suite=None, card=None, hw=None)
    with pytest.raises(review_gate.ReviewMissing, match="LD_PRELOAD"):
        nodes._sync_tree(rt, Candidate(framework="vllm", env=EVIL))
