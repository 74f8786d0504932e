"""Recording from a ledger: what cannot be replayed is noted (never breaks the run's outputs), and
secrets never reach a playbook."""
from agent.config import RunConfig, Target
from agent.ledger import Ledger
from agent.playbooks.schema import dumps, parse
from agent.playbooks.record import from_run
from agent.records import Result

BASE = {"framework": "sglang", "weights": "bf16", "parallel": {"tp": 8, "dp": 1, "ep": False}, "flags": {},
        "env": {}, "patches": [], "moe_configs": []}


def ledger(tmp_path, *kept: tuple[str, str, dict, str | None]) -> Ledger:
    led = Ledger(tmp_path, create=True)
    led.set_meta("config", RunConfig(target=Target(model="deepseek-v3", hw="mi355x")).model_dump(mode="json"))
    prev = None
    for phase, kind, cand, pid in (("framework", "config", BASE, None), *kept):
        t = led.add_trial(phase=phase, kind=kind, description=f"{phase} {kind}", candidate=cand,
                          incumbent_id=prev, patch_id=pid)
        led.start_trial(t)
        led.finish_trial(t, Result(verdict="kept", code="gain", reason=f"kept {t}"))
        prev = t
    return led


def test_an_escaping_llm_patch_is_noted_not_recorded(tmp_path):
    led = ledger(tmp_path, ("speculative", "patch", {**BASE, "patches": ["p01-llm"]}, "p01-llm"))
    led.add_patch(pid="p01-llm", key="k", fix="llm", framework="sglang", files=["../x"], diagnosis={},
                  diff="--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n", log_excerpt="")
    pb = from_run(led, tmp_path)
    assert len(pb["steps"]) == 1 and "'..'" in pb["notes"][0] and "trial 2" in pb["notes"][0]
    parse(pb)


def test_a_safe_llm_patch_is_kept_as_a_literal_diff(tmp_path):
    diff = "--- a/python/x.py\n+++ b/python/x.py\n@@ -1 +1 @@\n-a\n+b\n"
    led = ledger(tmp_path, ("speculative", "patch", {**BASE, "patches": ["p01-llm"]}, "p01-llm"))
    led.add_patch(pid="p01-llm", key="k", fix="llm", framework="sglang", files=["python/x.py"],
                  diagnosis={"kind": "engine_dead"}, diff=diff, log_excerpt="")
    step = from_run(led, tmp_path)["steps"][1]
    assert step["kind"] == "patch" and step["patches"][0]["fix"] == "literal" and step["patches"][0]["diff"] == diff
    assert step["when"]["after_diagnosis"] == "engine_dead"


def test_secrets_never_enter_a_playbook(tmp_path):
    env = {"OPENAI_API_KEY": "sk-live-0123456789abcdef", "NCCL_DEBUG": "WARN", "X": "hf_abcdefghijklmnopqrs"}
    led = ledger(tmp_path, ("flags", "config", {**BASE, "env": env}, None))
    pb = from_run(led, tmp_path)
    text = dumps(pb)
    assert "sk-live" not in text and "hf_abc" not in text and "OPENAI_API_KEY: " not in text
    assert pb["steps"][1]["env"] == {"NCCL_DEBUG": "WARN"}
    assert sum("looks like a secret" in n for n in pb["notes"]) == 2


def test_mtp_layer_and_parallel_become_card_templates(tmp_path):
    nextn = ('--- a/m/deepseek_nextn.py\n+++ b/m/deepseek_nextn.py\n@@ -1,2 +1,3 @@\n'
             '-        "model.layers.61.": "model.decoder.",\n+        "model.layers.61.": "model.decoder.",\n'
             '+        "model.layers.61.eh_proj": "model.eh_proj",\n')
    spec = {"--speculative-algorithm": "NEXTN", "--speculative-num-steps": 3}
    led = ledger(tmp_path, ("speculative", "patch", {**BASE, "flags": spec, "patches": ["p01-mtp_prefix_alias"]},
                            "p01-mtp_prefix_alias"),
                 ("parallel", "config", {**BASE, "flags": spec, "patches": ["p01-mtp_prefix_alias"],
                                         "parallel": {"tp": 4, "dp": 2, "ep": True}}, None))
    led.add_patch(pid="p01-mtp_prefix_alias", key="k", fix="mtp_prefix_alias", framework="sglang",
                  files=["m/deepseek_nextn.py"], diagnosis={"kind": "shape_mismatch"}, diff=nextn, log_excerpt="")
    steps = from_run(led, tmp_path)["steps"]
    assert steps[1]["patches"][0]["params"] == {"layer": "{num_hidden_layers}"}  # 61 is DeepSeek's layer count
    assert steps[1]["when"] == {"has_mtp": True, "after_diagnosis": "shape_mismatch"}
    assert steps[2]["parallel"] == {"tp": "{gpus_per_node//2}", "dp": 2, "ep": True} and steps[2]["when"] == {"is_moe": True}


def test_a_later_parallel_step_supersedes_an_earlier_one(tmp_path):
    par = lambda tp, dp, ep: {**BASE, "parallel": {"tp": tp, "dp": dp, "ep": ep}}
    led = ledger(tmp_path, ("parallel", "config", par(8, 1, True), None), ("parallel", "config", par(4, 2, False), None),
                 ("parallel", "config", par(4, 2, True), None),
                 ("flags", "config", {**par(4, 2, True), "flags": {"--kv-cache-dtype": "fp8_e4m3"}}, None),
                 ("flags", "config", {**par(4, 2, True), "flags": {"--chunked-prefill-size": 4096,
                                                                  "--kv-cache-dtype": "fp8_e4m3"}}, None))
    steps = from_run(led, tmp_path)["steps"]
    assert [s["kind"] for s in steps] == ["framework", "parallel", "flags", "flags"]
    assert steps[1]["parallel"] == {"tp": "{gpus_per_node//2}", "dp": 2, "ep": True}
    assert steps[1]["evidence"]["supersedes"] == [2, 3] and steps[1]["evidence"]["trial"] == 4
    # a flags step that sets another flag does not supersede the one before it
    assert steps[2]["flags"] == {"--kv-cache-dtype": "fp8_e4m3"} and steps[3]["flags"] == {"--chunked-prefill-size": 4096}


def test_a_layout_tuned_as_it_was_measured_is_recorded_with_it_and_replayed_on_it(tmp_path):
    """Side by side (--workers), the parallelism phase tunes each layout as it measures it: the kept
    trial is a MoE tune that also changed the layout, and a replay tunes on that layout."""
    from agent.planners.base import PlanContext
    from agent.playbooks.outcomes import tag
    from agent.playbooks.replay import ReplayPlanner
    from tools.candidate import Parallel
    from tools.hardware import get_hardware
    from tools.models import get_model
    configs = tmp_path / "nodes" / "trial-0002" / "moe_configs" / "trial-2"
    tuned = {**BASE, "parallel": {"tp": 4, "dp": 2, "ep": False}, "moe_configs": [str(configs / "E=256,N=512.json")],
             "env": {"SGLANG_MOE_CONFIG_DIR": str(configs)}}
    pb = from_run(ledger(tmp_path, ("parallel", "moe_tune", tuned, None)), tmp_path)
    step = pb["steps"][1]
    assert step["kind"] == "moe_tune" and step["parallel"] == {"tp": "{gpus_per_node//2}", "dp": 2}
    assert str(tmp_path) not in dumps(pb) and "env" not in step  # the tuned files are this run's own
    fallback = {"kind": "moe_default_config", "message": "default MoE config", "fatal": False, "evidence": []}
    own = {**BASE, "moe_configs": ["/old/E=256,N=256.json"], "env": {"SGLANG_MOE_CONFIG_DIR": "/old"}}
    # the incumbent on fallback kernels, and one already tuned for its own TP8 shards (whose log then
    # shows no fallback): either way the step's layout gets kernels tuned for its own shard shape
    for cand, diagnoses in ((BASE, [fallback]), (own, [])):
        baseline = {"id": 1, "phase": "framework", "kind": "config", "description": tag("s01", "baseline"),
                    "candidate": cand, "incumbent_id": None, "proposal": {}, "verdict": "kept", "status": "done",
                    "outcome": "launched", "diagnoses": diagnoses, "reason": "", "reason_code": None}
        ctx = PlanContext(config=RunConfig(target=Target(model="deepseek-v3", hw="mi355x")), card=get_model("deepseek-v3"),
                          hw=get_hardware("mi355x"), trials=[baseline], measurements=lambda i: [], incumbent_id=1,
                          frameworks=("sglang",), source_tree=lambda fw: None)
        p = ReplayPlanner(parse(pb)).propose(ctx)
        assert p.kind == "moe_tune" and p.candidate.parallel == Parallel(tp=4, dp=2) and "on TP4 x DP2" in p.description
        assert not p.candidate.moe_configs and "SGLANG_MOE_CONFIG_DIR" not in p.candidate.env
