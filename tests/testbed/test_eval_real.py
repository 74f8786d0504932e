"""`agent eval` against the real vLLM testbed: GSM8K subset, the factual QA task, and parity."""
from __future__ import annotations

import pytest


pytestmark = [pytest.mark.testbed, pytest.mark.slow]


def _sane(res: dict, task: str, n: int) -> None:
    assert res["task"] == task and res["n"] == n
    assert 0.0 <= res["accuracy"] <= 1.0
    assert res["stderr"] is not None and 0.0 <= res["stderr"] <= 0.5
    items = res.get("items") or res.get("results") or res.get("per_item")
    assert items is not None and len(items) == n


def test_gsm8k_subset(vllm_server, testbed, shared_dir, agent_cli):
    data = shared_dir / "data" / "gsm8k" / "test.jsonl"
    if not data.exists():
        pytest.skip(f"{data} is absent")
    res = agent_cli.json("eval", "--url", vllm_server.url, "--model", testbed.model_name, "--task", "gsm8k",
                     "--limit", "20", "--data", str(data))
    _sane(res, "gsm8k", 20)


def test_qa(vllm_server, testbed, agent_cli):
    res = agent_cli.json("eval", "--url", vllm_server.url, "--model", testbed.model_name, "--task", "qa")
    _sane(res, "qa", res["n"])
    assert res["n"] >= 10
    # SmolLM2-135M knows some facts (it names Paris as France's capital), so it is not all-wrong.
    assert res["accuracy"] > 0


def test_parity_against_itself_is_perfect(vllm_server, testbed, agent_cli):
    res = agent_cli.json("eval", "--url", vllm_server.url, "--model", testbed.model_name, "--task", "parity",
                     "--limit", "10", "--reference-url", vllm_server.url)
    assert res["n"] == 10
    assert res["accuracy"] == 1.0  # greedy decoding on one server is deterministic
