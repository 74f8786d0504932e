"""The generated eval tasks (long context, GPQA-Diamond-shaped, tau2-shaped) and the loop's default
suite: answer extraction and scoring are pure; the long-context length follows the workload and
stays inside the model's window; the same items come back on every call."""
from types import SimpleNamespace

import pytest

from tools.evals import get_task, long_context_tokens, suite_for
from tools.evals.generated import GPQADiamond, LongContext, Tau2


@pytest.mark.parametrize("text,want", [("Answer: B", "B"), ("think... Answer: (C)\n", "C"),
                                       ("Answer: A then Answer: D", "D"), ("no letter", None)])
def test_gpqa_extracts_the_final_letter(text, want):
    assert GPQADiamond().extract(text) == want


def test_tau2_scores_the_exact_tool_call():
    t = Tau2()
    it = t.items[0]
    assert t.score(t.extract(f"Calling the tool: {it.gold}"), it.gold)
    assert t.score(t.extract(f'Calling: {it.gold.replace(chr(39), chr(34))}'), it.gold)  # quote style only
    assert not t.score(t.extract("transfer_to_human_agents(summary='x')"), it.gold)
    assert not t.score(t.extract("I cannot help"), it.gold)
    assert len({i.id for i in t.items}) == len(t.items) == 278


def test_long_context_prompt_is_as_long_as_asked_and_ends_with_its_question():
    t = LongContext(context_tokens=2000, n=5)
    assert len(t.items) == 5
    for it in t.items:
        assert 7000 < len(it.prompt) < 9000 and it.prompt.rstrip().endswith("Answer:")
        assert it.question in it.prompt and f"is {it.gold}." in it.prompt
    assert t.score(t.extract(t.items[0].gold + "\n"), t.items[0].gold)
    assert not t.score(t.extract("123"), t.items[0].gold)


def test_long_context_length_follows_the_workload_capped_by_the_window():
    cfg = lambda n: SimpleNamespace(measure=SimpleNamespace(workload=SimpleNamespace(input_len=n)))
    assert long_context_tokens(cfg(20000), SimpleNamespace(max_position_embeddings=202752)) == 20000
    assert long_context_tokens(cfg(512), SimpleNamespace(max_position_embeddings=8192)) == 512
    capped = long_context_tokens(cfg(20000), SimpleNamespace(max_position_embeddings=8192))
    assert capped < 8192 * 0.85  # ~4 chars/token is an estimate: leave room
    assert long_context_tokens(None, None) == 20000


def test_default_suite_has_the_story_tasks_and_same_items_every_call(shared_dir):
    cfg = SimpleNamespace(measure=SimpleNamespace(workload=SimpleNamespace(input_len=300)))
    s = suite_for(cfg, SimpleNamespace(max_position_embeddings=8192))
    assert [t.name for t in s.tasks] == ["gsm8k", "longctx", "gpqa-diamond", "tau2", "qa"]
    assert s.tasks[1].context_tokens == 300
    again = suite_for(cfg, SimpleNamespace(max_position_embeddings=8192))
    assert [[i.prompt for i in t.items] for t in s.tasks] == [[i.prompt for i in t.items] for t in again.tasks]


@pytest.mark.parametrize("name", ["longctx", "gpqa-diamond", "tau2"])
def test_get_task_knows_the_generated_tasks(name):
    assert get_task(name).name == name
