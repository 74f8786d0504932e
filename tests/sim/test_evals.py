"""Issue 2, acceptance 1 (evals): the story's FP8 vs MXFP4 eval numbers within their standard
errors, answers correlated item by item, ATOM's long-context degradation, through the Client."""
import asyncio
import re

import pytest

from sandboxes.sim import SimSandbox
from sandboxes.sim.accuracy import Answerer, Skill
from tests.sim.conftest import git_apply, make_diff
from sandboxes.sim.frameworks import ATOM_SPARSE_MLA
from tools.candidate import Candidate, Parallel
from tools.evals import get_task, shared_gsm8k
from tools.evals import synthetic
from tools.evals.stats import accuracy

needs_gsm8k = pytest.mark.skipif(not shared_gsm8k().is_file(), reason="../shared/data/gsm8k/test.jsonl is absent")


@pytest.fixture(scope="module")
def clients(tmp_path_factory):
    d = tmp_path_factory.mktemp("evals")
    sim = SimSandbox("glm-5.2", "mi355x", seed=0)
    out = {}
    for w in ("fp8", "mxfp4"):
        out[w] = sim.launch(Candidate(framework="sglang", weights=w, parallel=Parallel(tp=8)), d).client
    out["sim"] = sim
    return out


def complete(client, prompts, **kw):
    return asyncio.run(client.complete(prompts, **kw))


@needs_gsm8k
def test_gsm8k_fp8_vs_mxfp4_within_story_se(clients):
    task = get_task("gsm8k")
    items = task.items[:200]
    res = {}
    for w in ("fp8", "mxfp4"):
        outs = complete(clients[w], [it.prompt for it in items], max_tokens=task.max_tokens)
        res[w] = [task.score(task.extract(o), it.gold) for o, it in zip(outs, items)]
    (a8, _), (a4, _) = accuracy(res["fp8"]), accuracy(res["mxfp4"])
    assert abs(a8 - 0.965) <= 0.013 and abs(a4 - 0.955) <= 0.014, (a8, a4)
    assert abs((a4 - a8) - (0.955 - 0.965)) <= 0.014
    # correlated item by item: the items fp8 misses are mostly the ones mxfp4 misses too
    both_wrong = sum(1 for x, y in zip(res["fp8"], res["mxfp4"]) if not x and not y)
    assert both_wrong >= 0.5 * res["fp8"].count(False)


def _letter(text):
    m = re.search(r"Answer:\s*\(?([ABCD])", text)
    return m.group(1) if m else None


def test_gpqa_two_seeds_temp1_within_story_se(clients):
    items = synthetic.gpqa_diamond_items()
    assert len(items) == 198
    acc = {}
    for w in ("fp8", "mxfp4"):
        correct = []
        for seed in (0, 1):
            outs = complete(clients[w], [synthetic.gpqa_prompt(it) for it in items], temperature=1.0, seed=seed)
            correct += [_letter(o) == it["gold"] for o, it in zip(outs, items)]
        acc[w] = accuracy(correct)[0]
    assert abs(acc["fp8"] - 0.9217) <= 0.027 and abs(acc["mxfp4"] - 0.9026) <= 0.029, acc
    assert abs((acc["mxfp4"] - acc["fp8"]) - (0.9026 - 0.9217)) <= 0.029


def test_tau2_macro_within_se(clients):
    items = synthetic.tau2_items()
    macro = {}
    for w in ("fp8", "mxfp4"):
        outs = complete(clients[w], [it["question"] for it in items])
        per = {}
        for o, it in zip(outs, items):
            per.setdefault(it["domain"], []).append(it["gold"] in o)
        macro[w] = sum(sum(v) / len(v) for v in per.values()) / len(per)
        se = (sum(accuracy(v)[1] ** 2 for v in per.values()) ** 0.5) / len(per)
        story = {"fp8": 0.819, "mxfp4": 0.834}[w]
        assert abs(macro[w] - story) <= 2 * se, (w, macro[w], se)
    assert abs((macro["mxfp4"] - macro["fp8"]) - 0.015) <= 0.03


def test_atom_degrades_at_long_context_and_its_source_explains_it(tmp_path):
    sim = SimSandbox("glm-5.2", "mi355x", seed=0)
    items = synthetic.long_context_items(n=20)
    prompts = [synthetic.long_context_prompt(it) for it in items]
    assert all(18000 < len(p) / 4 < 22000 for p in prompts)  # as long as the throughput workload's input

    def acc(fw, extra=None):
        c = sim.launch(Candidate(framework=fw, weights="mxfp4", parallel=Parallel(tp=8), **(extra or {})), tmp_path).client
        return sum(o.strip() == it["gold"] for o, it in zip(complete(c, prompts), items)) / len(items)

    assert acc("atom") < 0.6 and acc("sglang") > 0.85
    tree = sim.source_tree("atom", tmp_path)
    git_apply(tree, make_diff(tree, ATOM_SPARSE_MLA, "MAX_INDEXER_KEYS = 8192", "MAX_INDEXER_KEYS = 262144"))
    assert acc("atom") > 0.85
    # ATOM's short-prompt answers are fine
    c = sim.launch(Candidate(framework="atom", weights="mxfp4", parallel=Parallel(tp=8)), tmp_path).client
    it = synthetic.tau2_items()[0]
    assert "tool" in complete(c, [it["question"]])[0]


def test_answers_are_robust_to_prompt_format_and_unknown_prompts_get_no_answer():
    a = Answerer.load()
    it = synthetic.gpqa_diamond_items()[3]
    plain = a.answer(synthetic.gpqa_prompt(it), Skill())
    chat = a.answer("<|system|>You are helpful.<|user|>Here are examples: What is 2+2? 4.\n\n"
                    + "   ".join(synthetic.gpqa_prompt(it).split()) + "<|assistant|>", Skill())
    assert plain == chat
    assert "can't tell" in a.answer("Write me a poem about the sea.", Skill())


def test_temperature_and_seed(clients):
    items = synthetic.tau2_items()
    prompts = [it["question"] for it in items]
    g0 = complete(clients["fp8"], prompts)
    assert g0 == complete(clients["fp8"], prompts, seed=5)  # greedy ignores the seed
    t0 = complete(clients["fp8"], prompts, temperature=1.0, seed=0)
    t1 = complete(clients["fp8"], prompts, temperature=1.0, seed=1)
    assert t0 != t1
    hot = sum(it["gold"] in o for o, it in zip(t0, items))
    cold = sum(it["gold"] in o for o, it in zip(g0, items))
    assert hot < cold


def test_evals_cost_simulated_time(clients):
    sim = clients["sim"]
    t = sim.elapsed_s()
    complete(clients["fp8"], [it["question"] for it in synthetic.tau2_items()[:64]], max_tokens=256)
    assert sim.elapsed_s() > t
