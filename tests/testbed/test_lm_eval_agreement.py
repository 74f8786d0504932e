"""On the real vLLM testbed, the project's GSM8K and lm-evaluation-harness's (local-completions,
the same items and the same 5-shot prompts, greedy) agree within their standard errors (issue 17).
Run by `python -m pytest -m testbed`; skips without the testbed, lm-eval or the GSM8K data."""
from __future__ import annotations

import math

import pytest

pytestmark = [pytest.mark.testbed, pytest.mark.slow]

# SmolLM2-135M scores 0 on GSM8K through either harness (2026-12-06, AMD EPYC, eager fp32: 0/30 both,
# every item scored alike; at 60 items it took 225 s): what the test can prove here is that both send
# the same prompts for the same items and score them alike, which 30 items show as well as 60.
N = 30


def test_project_gsm8k_and_lm_eval_agree_within_their_standard_errors(vllm_server, testbed, shared_dir):
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'inferloop[evals]')")
    from tools.bench.client import OpenAIClient
    from tools.evals import get_task
    from tools.evals import lm_eval as L
    data = shared_dir / "data" / "gsm8k" / "test.jsonl"
    if not data.is_file():
        pytest.skip(f"{data} is absent")
    task = get_task("gsm8k", data=data)
    ours = task.run(OpenAIClient(vllm_server.url, testbed.model_name), limit=N)
    name, out = L.evaluate(vllm_server.url, testbed.model_name, "gsm8k", data=data, limit=N, concurrency=4)
    theirs = L.to_result(name, out, "gsm8k")
    assert L.prompts(out, name) == [it.prompt for it in task.items[:N]]
    assert [i.id for i in theirs.items] == [i.id for i in ours.items]
    gap, se = abs(ours.accuracy - theirs.accuracy), math.hypot(ours.stderr, theirs.stderr)
    print(f"\nproject {ours.accuracy:.3f} +/- {ours.stderr:.3f}, lm-eval {theirs.accuracy:.3f} +/- "
          f"{theirs.stderr:.3f}, gap {gap:.3f} (combined SE {se:.3f}); items scored alike: "
          f"{sum(a == b for a, b in zip(ours.correct(), theirs.correct()))}/{N}")
    # A model this small may score 0 on both: then the gap must be exactly 0.
    assert gap <= se or gap == 0.0
