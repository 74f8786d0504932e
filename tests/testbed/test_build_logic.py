"""The testbed build's own logic, without building anything: stamps, skipping, invalidation,
failure handling, and the tokenizer repair. Fast; no marker."""
from __future__ import annotations

import json

import pytest

from sandboxes.testbed.build import BuildError, build, is_built
from sandboxes.testbed.tokenizer_fix import fix_model_dir


def _steps(calls, fail=None, keys=("k1", "k2", "k3")):
    def make(name):
        def fn(base, say):
            calls.append(name)
            if name == fail:
                raise BuildError(f"{name} broke")
        return fn
    return [(n, make(n), k) for n, k in zip(("a", "b", "c"), keys)]


def test_build_runs_each_step_once_then_skips(tmp_path):
    calls, said = [], []
    report = build(tmp_path, steps=_steps(calls), say=said.append)
    assert calls == ["a", "b", "c"] and not any(r["skipped"] for r in report.values())
    assert is_built(tmp_path, steps=_steps([]))
    report = build(tmp_path, steps=_steps(calls), say=said.append)
    assert calls == ["a", "b", "c"]  # nothing ran again
    assert all(r["skipped"] for r in report.values())
    assert any("b: done before" in m for m in said)  # the rerun says what it skipped


def test_changed_step_reruns_it_and_everything_after(tmp_path):
    build(tmp_path, steps=_steps([]), say=lambda m: None)
    calls = []
    build(tmp_path, steps=_steps(calls, keys=("k1", "CHANGED", "k3")), say=lambda m: None)
    assert calls == ["b", "c"]
    calls.clear()
    build(tmp_path, steps=_steps(calls, keys=("k1", "CHANGED", "k3")), force=("a",), say=lambda m: None)
    assert calls == ["a", "b", "c"]


def test_failed_step_leaves_no_stamp_and_is_retried(tmp_path):
    calls = []
    with pytest.raises(BuildError, match="b broke"):
        build(tmp_path, steps=_steps(calls, fail="b"), say=lambda m: None)
    assert calls == ["a", "b"]
    assert not is_built(tmp_path, steps=_steps([]))
    calls.clear()
    build(tmp_path, steps=_steps(calls), say=lambda m: None)
    assert calls == ["b", "c"]  # a was done; b is retried


def test_stamp_records_duration(tmp_path):
    build(tmp_path, steps=_steps([]), say=lambda m: None)
    stamp = json.loads((tmp_path / "stamps" / "a.json").read_text())
    assert stamp["key"] == "k1" and stamp["seconds"] >= 0


def test_tokenizer_fix(tmp_path):
    (tmp_path / "tokenizer.json").write_text(json.dumps({
        "added_tokens": [{"id": 1, "content": "<|im_start|>"}, {"id": 2, "content": "<|im_end|>"}],
        "model": {"type": "BPE", "vocab": {"a": 3}}, "post_processor": {"type": "TemplateProcessing"},
        "decoder": {"type": "Sequence", "decoders": []}}))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"add_bos_token": True, "eos_token": "<|im_start|>", "tokenizer_class": "LlamaTokenizer", "x": 1}))
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 2}))
    (tmp_path / "tokenizer.model").write_bytes(b"sentencepiece")
    fix_model_dir(tmp_path)
    tok = json.loads((tmp_path / "tokenizer.json").read_text())
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert tok["post_processor"] is None and tok["decoder"]["type"] == "ByteLevel"
    assert tok["model"] == {"type": "BPE", "vocab": {"a": 3}}
    assert cfg == {"add_bos_token": False, "eos_token": "<|im_end|>", "tokenizer_class": "PreTrainedTokenizerFast",
                   "x": 1}
    assert not (tmp_path / "tokenizer.model").exists()


def test_tokenizer_fix_names_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        fix_model_dir(tmp_path)


# ---- the serving mode (sandboxes/testbed/mode.py): chosen by what the server answers ----

def _answers(table):
    asked = []

    def answer(name, flags):
        asked.append(name)
        return table[name]
    return asked, answer


def _paris(a):
    return "paris" in a.lower()


def test_mode_falls_back_from_garbage_eager_bf16_and_says_why():
    from sandboxes.testbed import mode
    asked, answer = _answers({"eager-bf16": "L'Étoile, la Marseillaise, la femme", "eager-fp32": "Paris.",
                              "compiled-bf16": "Paris."})
    m = mode.choose(answer, _paris, say=lambda s: None, modes=mode.order(["avx512f", "amx_bf16"]))
    assert asked == ["eager-bf16", "eager-fp32"]  # stops at the first right mode
    assert m["mode"] == "eager-fp32" and m["flags"] == {"--enforce-eager": True, "--dtype": "float32"}
    assert "eager-bf16 answered \"L'Étoile" in m["why"]
    assert [t["right"] for t in m["tried"]] == [False, True]


def test_mode_keeps_eager_bf16_where_it_is_right():
    from sandboxes.testbed import mode
    asked, answer = _answers({"eager-bf16": "The capital of France is Paris."})
    m = mode.choose(answer, _paris, say=lambda s: None, modes=mode.order(["avx512f", "avx512_bf16"]))
    assert asked == ["eager-bf16"] and m["flags"] == {"--enforce-eager": True}


def test_a_cpu_without_native_bf16_tries_eager_fp32_first():
    from sandboxes.testbed import mode
    asked, answer = _answers({"eager-fp32": "Paris.", "eager-bf16": "Paris."})
    m = mode.choose(answer, _paris, say=lambda s: None, modes=mode.order(["avx2", "avx512f", "avx512_vnni"]))
    assert asked == ["eager-fp32"] and m["flags"] == {"--enforce-eager": True, "--dtype": "float32"}
    assert [n for n, _ in mode.order(["avx2"])] == ["eager-fp32", "eager-bf16", "compiled-bf16"]
    assert mode.order(["amx_bf16"]) == mode.MODES and mode.order(["avx512_bf16"]) == mode.MODES


def test_no_right_mode_is_an_error_with_every_answer():
    from sandboxes.testbed import mode
    _, answer = _answers({"eager-bf16": "garbage", "eager-fp32": "(did not start: boom)", "compiled-bf16": "Lyon"})
    with pytest.raises(LookupError, match="eager-fp32: '\\(did not start: boom\\)'.*compiled-bf16: 'Lyon'"):
        mode.choose(answer, _paris, say=lambda s: None)


def test_the_smoke_step_is_keyed_by_the_cpu(tmp_path, monkeypatch):
    from sandboxes.testbed import build as b, mode
    (key,) = [k for n, _, k in b.STEPS if n == "smoke"]
    assert key == b._key(b.SMOKE_QUESTION, mode.order(), mode.cpu_key())
    monkeypatch.setattr(mode, "cpu", lambda: {"model_name": "Other CPU", "flags": ["amx_bf16"]})
    assert b._key(b.SMOKE_QUESTION, mode.order(), mode.cpu_key()) != key  # another CPU proves its mode again


def test_unproven_mode_says_so(tmp_path):
    from sandboxes.testbed import mode
    m = mode.load(tmp_path)
    assert m["mode"] == mode.order()[0][0] and "not proven" in m["why"]  # the first this CPU would try
    (tmp_path / "mode.json").write_text(json.dumps({"mode": "eager-fp32", "flags": {"--dtype": "float32"},
                                                    "why": "x", "cpu": {"model_name": "C", "flags": ["avx2"]}}))
    assert mode.describe(mode.load(tmp_path)) == "eager-fp32 (--dtype float32) on C [avx2]: x"
