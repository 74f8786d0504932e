"""The GPU ground's CPU-checkable parts: the test model's config, parity scoring, the model overlay,
the planner's scope. (The GPU run itself is recorded under tests/gpu/results/.)"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gpu.make_model import SIZES, config_dict, vocab_size_of
from tools.evals.context_parity import ParitySuite, contexts, per_item, prompts, score
from sandboxes.transformers_serve import overlay_model


def test_test_model_is_a_glm52_miniature():
    c = config_dict("gpu", 49152)
    assert c["architectures"] == ["GlmMoeDsaForCausalLM"] and c["model_type"] == "glm_moe_dsa"
    # GLM-5.2's structure: top-8 routing over many experts plus one shared, MLA, DSA indexer, dense lead
    assert c["num_experts_per_tok"] == 8 and c["n_routed_experts"] >= 8 * c["num_experts_per_tok"]
    assert c["n_shared_experts"] == 1 and c["first_k_dense_replace"] >= 1
    assert c["kv_lora_rank"] < c["q_lora_rank"] < c["hidden_size"]
    assert c["index_topk"] > 0 and c["index_n_heads"] > 0
    assert c["eos_token_id"] is None  # never stops early: requests generate exactly max_tokens
    assert c["vocab_size"] == 49152
    g4 = config_dict("tiny", 100, "glm4_moe")
    assert g4["architectures"] == ["Glm4MoeForCausalLM"] and g4["num_attention_heads"] % g4["num_key_value_heads"] == 0
    with pytest.raises(ValueError, match="allowed"):
        config_dict("huge", 10)
    assert set(SIZES) == {"gpu", "tiny"}


def test_vocab_size_counts_added_tokens(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps(
        {"model": {"vocab": {"a": 0, "b": 1, "c": 2}}, "added_tokens": [{"id": 7, "content": "<x>"}]}))
    assert vocab_size_of(tmp_path) == 8


def test_prompts_are_fixed():
    assert prompts(3) == prompts(3) and len(set(prompts(5))) == 5
    assert prompts(2, seed=1) != prompts(2)


def test_score_is_exact_and_failed_requests_lose():
    assert score(["ab", "cd", ""], ["ab", "cx", ""]) == [1, 0, 0]
    with pytest.raises(ValueError):
        score(["a"], ["a", "b"])


class EchoClient:
    """A Client whose completions are scripted (obeys the protocol's complete())."""

    def __init__(self, outputs):
        self.outputs, self.errors = outputs, {}

    async def complete(self, prompts, *, max_tokens=256, temperature=0.0, seed=0, concurrency=8, stop=None):
        assert temperature == 0.0
        self.seen = (len(prompts), max_tokens, concurrency)
        return list(self.outputs[:len(prompts)])


def test_contexts_cut_each_prompt_at_growing_word_counts():
    q = contexts(2, 4, words=16)
    assert [i for i, _ in q] == [0, 0, 0, 0, 1, 1, 1, 1]
    lens = [len(c.split(" ")) for _, c in q[:4]]
    assert lens == sorted(lens) and lens[-1] == 16
    assert prompts(1, words=16)[0].startswith(q[0][1])
    assert per_item([1, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1], 2) == [2 / 3, 1 / 3]


def test_parity_suite_records_the_first_run_as_reference(tmp_path):
    s = ParitySuite(tmp_path, items=2, cuts=2, tokens=1, concurrency=1)
    assert s.run(EchoClient(["a", "b", "c", "d"]), limit=200, seed=0) == {"greedy_parity": [1.0, 1.0]}
    assert s.run(EchoClient(["a", "x", "y", "z"]), limit=200, seed=0) == {"greedy_parity": [0.5, 0.0]}
    again = ParitySuite(tmp_path, items=2, cuts=2)  # a resumed run compares with the same reference
    assert again.run(EchoClient(["a", "b", "c", "d"]), limit=1, seed=0) == {"greedy_parity": [1.0]}
    assert len((tmp_path / "parity_runs.jsonl").read_text().splitlines()) == 3


def test_reference_with_failed_requests_is_refused(tmp_path):
    c = EchoClient(["a", ""])
    c.errors = {1: "HTTP 500"}
    s = ParitySuite(tmp_path, items=1, cuts=2)

    async def complete(prompts, **kw):
        return ["a", ""]
    c.complete = complete
    with pytest.raises(RuntimeError, match="incomplete"):
        s.run(c, limit=2, seed=0)
    assert not (tmp_path / "parity_reference.json").exists()


def test_a_reference_cut_short_is_never_read_as_one(tmp_path, monkeypatch):
    """A run killed while writing the reference leaves none: the resumed run records it again
    (a half-written one made every later trial fail reading it)."""
    real = Path.write_text

    def half_then_killed(self, text, *a, **kw):
        real(self, text[: len(text) // 2], *a, **kw)
        raise KeyboardInterrupt("killed mid-write")
    monkeypatch.setattr(Path, "write_text", half_then_killed)
    with pytest.raises(KeyboardInterrupt):
        ParitySuite(tmp_path, items=2, cuts=2).run(EchoClient(["a", "b", "c", "d"]), limit=200, seed=0)
    monkeypatch.undo()
    assert not (tmp_path / "parity_reference.json").exists()
    again = ParitySuite(tmp_path, items=2, cuts=2)
    assert again.run(EchoClient(["a", "b", "c", "d"]), limit=200, seed=0) == {"greedy_parity": [1.0, 1.0]}


def test_overlay_links_weights_and_rewrites_config(tmp_path):
    m = tmp_path / "m"
    m.mkdir()
    (m / "config.json").write_text(json.dumps({"model_type": "glm_moe_dsa", "hidden_size": 8}))
    (m / "model.safetensors").write_bytes(b"w" * 10)
    assert overlay_model(m, {}, tmp_path / "o0") == m  # nothing to override: the model itself
    o = overlay_model(m, {"experts_implementation": "batched_mm"}, tmp_path / "o1")
    assert (o / "model.safetensors").is_symlink() and (o / "model.safetensors").read_bytes() == b"w" * 10
    cfg = json.loads((o / "config.json").read_text())
    assert cfg == {"model_type": "glm_moe_dsa", "hidden_size": 8, "experts_implementation": "batched_mm"}
    assert json.loads((m / "config.json").read_text()).get("experts_implementation") is None
    overlay_model(m, {"experts_implementation": "eager"}, tmp_path / "o1")  # idempotent re-launch
    assert json.loads((o / "config.json").read_text())["experts_implementation"] == "eager"


def test_gpu_planner_baseline_is_one_gpu_defaults():
    from agent.config import RunConfig, Target
    from agent.planners.base import PlanContext
    from tests.gpu.loop import GpuPlanner
    from tools import hardware, models
    card = models.get_model("glm-5.2")
    hw = hardware.get_hardware("h200")
    ctx = PlanContext(config=RunConfig(target=Target(model="glm-5.2", hw="h200")), card=card, hw=hw, trials=[],
                      measurements=lambda tid: [], incumbent_id=None, frameworks=("transformers",),
                      source_tree=lambda fw: Path("."))
    p = GpuPlanner().propose(ctx)
    assert p.candidate.framework == "transformers" and p.candidate.parallel.tp == 1
    assert p.candidate.flags == {}
    assert list(GpuPlanner().candidates(ctx, "parallel")) == [] and list(GpuPlanner().candidates(ctx, "precision")) == []
