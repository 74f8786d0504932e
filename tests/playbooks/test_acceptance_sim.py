"""Issue 5 acceptance on the simulator, with the shipped playbook (recorded by a real sim run of
`agent optimize --model glm-5.2 --hw mi355x --approve auto`), through the real CLI entry point."""
import json
import math
from pathlib import Path

import pytest

from agent.playbooks import schema as pbm
from agent.cli import main
from agent.ledger import Ledger
from agent.config import RunConfig, Target
from agent.playbooks.adapt import adapt, build_candidate
from agent.playbooks.outcomes import step_of
from agent.playbooks.replay import render_patch
from agent.run import default_sandbox
from tools.candidate import Candidate
from tools.hardware import get_hardware
from tools.models import get_model

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "playbooks" / "glm-5.2-mi355x.yaml"


@pytest.fixture(scope="module")
def shipped() -> pbm.Playbook:
    if not SHIPPED.is_file():
        pytest.skip(f"{SHIPPED} is not recorded yet")
    return pbm.load(SHIPPED)


def cli_replay(capsys, model: str, hw: str, run_dir: Path) -> dict:
    try:
        main(["replay", str(SHIPPED), "--model", model, "--hw", hw, "--approve", "auto", "--json",
              "--run-dir", str(run_dir)])
    except SystemExit as e:
        assert not e.code, capsys.readouterr().err[-3000:]
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def recorded_best(pb: pbm.Playbook) -> dict:
    """The recording run's best configuration: its baseline with every (kept) step applied."""
    card, hw = get_model(pb.source.model), get_hardware(pb.source.hw)
    a0 = adapt(pb.steps[0], card, hw)
    c = Candidate(framework=a0.framework, weights=a0.weights, parallel=a0.parallel, flags=a0.flags)
    fixes, tuned = [], False
    for s in pb.steps[1:]:
        a = adapt(s, card, hw)
        c = build_candidate(c, a)
        fixes += [p["fix"] for p in a.patches]
        tuned = tuned or s.kind == "moe_tune"
    return {"framework": c.framework, "weights": c.weights, "parallel": c.parallel.model_dump(),
            "flags": c.flags, "fixes": sorted(fixes), "moe_tuned": tuned}


def best_of(out: dict) -> dict:
    b = out["best"]
    return {"framework": b["framework"], "weights": b["weights"], "parallel": b["parallel"], "flags": b["flags"],
            "fixes": sorted(p.split("-", 1)[1] for p in b["patches"]), "moe_tuned": bool(b["moe_configs"])}


def same_flags(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(
        math.isclose(a[k], b[k], rel_tol=1e-9) if isinstance(a[k], float) else a[k] == b[k] for k in a)


@pytest.mark.slow
def test_glm_replay_reaches_the_same_best_in_a_third_of_the_trials(shipped, tmp_path, capsys):
    # Issue 5's criterion. It holds on seed 0 since the refit of 2026-12-04 (3-step MTP measured +4.2%
    # in the recording and is carried); on the fit before it MTP measured -7.2% on seed 0 and was
    # reverted, so this was a strict xfail: which way it goes rests on a step within a few % of noise.
    out = cli_replay(capsys, "glm-5.2", "mi355x", tmp_path / "r")
    assert out["status"] == "done"
    want, got = recorded_best(shipped), best_of(out)
    assert same_flags(want.pop("flags"), got.pop("flags")) and got == want
    assert out["launched"] * 3 <= shipped.source.trials, (out["launched"], shipped.source.trials)
    assert {o["outcome"] for o in out["steps"]} == {"carried"}, out["steps"]
    new = pbm.load(tmp_path / "r" / "playbook.yaml")
    assert new.replayed_from == shipped.name and len(new.steps) == len(shipped.steps)


@pytest.mark.slow
def test_a_playbook_recorded_on_an_older_sglang_replays_with_the_renamed_flag(shipped, tmp_path, capsys):
    # issue 14: sglang 0.5.12 spelled it --cuda-graph-max-bs; the sim's default, 0.5.23, split it, and
    # the replay says which name it launched instead, in the trial's record
    text = SHIPPED.read_text().replace("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")
    assert text != SHIPPED.read_text()
    old = tmp_path / "recorded-on-0.5.12.yaml"
    old.write_text(text)
    try:
        main(["replay", str(old), "--model", "glm-5.2", "--hw", "mi355x", "--approve", "auto", "--json",
              "--run-dir", str(tmp_path / "r")])
    except SystemExit as e:
        assert not e.code, capsys.readouterr().err[-3000:]
    t = next(t for t in Ledger(tmp_path / "r").trials() if "--cuda-graph-max-bs-decode" in t["candidate"]["flags"])
    assert "--cuda-graph-max-bs" not in t["candidate"]["flags"]
    assert "adapted: --cuda-graph-max-bs -> --cuda-graph-max-bs-decode (sglang 0.5.23 has no --cuda-graph-max-bs" \
        in t["rationale"], t["rationale"]


@pytest.mark.slow
def test_deepseek_replay_rechecks_the_framework_and_adapts_the_mtp_patch_to_layer_61(shipped, tmp_path, capsys):
    out = cli_replay(capsys, "deepseek-v3", "mi355x", tmp_path / "r")
    assert out["status"] == "done"
    ts = Ledger(tmp_path / "r").trials()
    # Another model: the framework comparison runs right after the baseline, before any step.
    n = next(i for i, t in enumerate(ts[1:], 1) if t["phase"] != "framework")
    assert n > 1 and all(step_of(t) is None and "re-checked here" in t["rationale"] for t in ts[1:n])
    # The MTP step's patch, adapted to DeepSeek (layer 61) and rendered against this backend's sglang tree.
    step = next(s for s in shipped.steps if any(p.fix == "mtp_prefix_alias" for p in s.patches))
    card, hw = get_model("deepseek-v3"), get_hardware("mi355x")
    p = next(p for p in adapt(step, card, hw).patches if p["fix"] == "mtp_prefix_alias")
    tree = default_sandbox(RunConfig(target=Target(model="deepseek-v3", hw="mi355x")), card, hw).source_tree(
        "sglang", tmp_path / "tree")
    diff = render_patch(p, tree, {}).diff
    for m in ("eh_proj", "enorm", "hnorm", "shared_head"):
        assert f'+            "model.layers.61.{m}": "model.{m}",' in diff
    assert "layers.78" not in diff
    # On the fitted sim ATOM serves DeepSeek best, and the step's sglang flags do not exist there:
    # the step hands its phase to the built-in planner, which measures ATOM's own MTP.
    outcome = next(o for o in out["steps"] if o["step"] == step.id)
    if out["best"]["framework"] == "sglang":  # the re-check kept sglang: the patched MTP server must run
        assert outcome["outcome"] in ("carried", "reverted"), outcome
    else:
        assert outcome["outcome"] == "failed" and "handed over" in outcome["reason"], outcome
        spec = [t for t in ts if t["phase"] == "speculative" and step_of(t) is None and t["outcome"] == "launched"]
        assert spec and all(t["candidate"]["framework"] == out["best"]["framework"] for t in spec)


@pytest.mark.slow
def test_deepseek_replay_reaches_90pct_of_a_full_optimize_in_fewer_trials(tmp_path, capsys, shipped):
    out = cli_replay(capsys, "deepseek-v3", "mi355x", tmp_path / "r")
    try:
        main(["optimize", "--model", "deepseek-v3", "--hw", "mi355x", "--approve", "auto", "--json",
              "--run-dir", str(tmp_path / "full")])
    except SystemExit as e:
        assert not e.code
    full = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["best"]["knee_tok_s"] >= 0.9 * full["best"]["knee_tok_s"], (out["best"]["knee_tok_s"], full["best"]["knee_tok_s"])
    assert out["launched"] < Ledger(tmp_path / "full").launched_count()


@pytest.mark.slow
def test_qwen_b200_replay_skips_rocm_and_mtp_steps_and_completes(shipped, tmp_path, capsys):
    out = cli_replay(capsys, "qwen3-235b-a22b", "b200", tmp_path / "r")
    assert out["status"] == "done" and out["best"]["knee_tok_s"] > 0
    by = {o["step"]: o for o in out["steps"]}
    for s in shipped.steps:
        fixes = {p.fix for p in s.patches}
        if "mtp_prefix_alias" in fixes or s.when.has_mtp:
            assert by[s.id]["outcome"] == "skipped" and "no MTP (NextN) draft layers" in by[s.id]["reason"]
        if "rocm_include_guard" in fixes or s.when.vendor == ["amd"]:
            assert by[s.id]["outcome"] == "skipped" and "b200 is nvidia" in by[s.id]["reason"]
    assert not Ledger(tmp_path / "r").patches()
    assert "## Playbook replay" in (tmp_path / "r" / "report.md").read_text()
