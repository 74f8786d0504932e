"""Eval tasks, extraction, scoring and paired statistics (exact values), and `agent eval` end to
end against the mock server (which answers known questions from a file)."""
import asyncio
import json
import math
import sys

import pytest

from agent.cli import main
from agent.errors import BadInput
from tools.evals import get_task, suite_for
from tools.evals.gsm8k import GSM8K
from tools.evals.parity import Parity
from tools.evals.qa import FACTS, FactQA
from tools.evals.stats import accuracy, compare, mcnemar_exact
from tools.server import launch_process

READY = "Application startup complete."


# -- statistics ----------------------------------------------------------------------------
def test_accuracy_and_stderr():
    assert accuracy([1, 1, 0, 0]) == (0.5, math.sqrt(0.25 / 3))
    p, se = accuracy([1] * 193 + [0] * 7)  # the story's GSM8K 0.965 over 200 items
    assert p == 0.965 and round(se, 3) == 0.013
    assert accuracy([True]) == (1.0, 0.0)
    with pytest.raises(ValueError):
        accuracy([])


@pytest.mark.parametrize("b,c,p", [(0, 0, 1.0), (0, 5, 0.0625), (5, 0, 0.0625), (1, 9, 22 / 1024),
                                   (3, 3, 1.0), (2, 8, 2 * (1 + 10 + 45) / 1024)])
def test_mcnemar_exact(b, c, p):
    assert mcnemar_exact(b, c) == pytest.approx(p, abs=1e-15)


def test_compare_identical_is_non_inferior_and_exact():
    r = [1, 0, 1, 1, 0, 1, 1, 1]
    c = compare(r, r, margin=0.02)
    assert (c.delta, c.ci_low, c.ci_high, c.b, c.c, c.mcnemar_p) == (0.0, 0.0, 0.0, 0, 0, 1.0)
    assert c.non_inferior and c.verdict.startswith("non-inferior")


def test_compare_clear_regression_is_not_non_inferior():
    ref = [1] * 100
    cand = [1] * 80 + [0] * 20
    c = compare(ref, cand, margin=0.05, seed=1)
    assert c.delta == -0.2 and c.b == 20 and c.c == 0 and not c.non_inferior
    assert c.mcnemar_p == pytest.approx(2 * 0.5 ** 20)
    assert c.ci_high < -0.1


def test_compare_small_loss_within_margin():
    ref = [1] * 190 + [0] * 10
    cand = [1] * 189 + [0] * 10 + [1]  # one loss, one gain (different items): delta 0
    cand[0] = 0
    c = compare(ref, cand, margin=0.03, seed=0)
    assert c.b == 2 and c.c == 1 and c.delta == pytest.approx(-0.005) and c.non_inferior
    assert compare(ref, cand, margin=0.03, seed=0) == c  # deterministic for a seed
    with pytest.raises(ValueError, match="same items"):
        compare([1], [1, 0])


# -- tasks ---------------------------------------------------------------------------------
def _gsm_file(tmp_path, n=8):
    rows = [{"question": f"Tom has {i} apples and buys {i + 1} more. How many apples now?",
             "answer": f"He has {i}+{i + 1}=<<{i}+{i + 1}={2 * i + 1}>>{2 * i + 1}.\n#### {2 * i + 1:,}"}
            for i in range(n)]
    rows[6]["answer"] = "Big.\n#### 1,234"
    p = tmp_path / "gsm.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return p, rows


def test_gsm8k_prompt_gold_and_extraction(tmp_path):
    p, rows = _gsm_file(tmp_path)
    t = GSM8K.from_file(p)
    assert [i.id for i in t.items] == ["gsm8k-0005", "gsm8k-0006", "gsm8k-0007"]
    assert [i.gold for i in t.items] == ["11", "1234", "15"]
    it = t.items[0]
    assert it.prompt.count("Question:") == 6 and it.prompt.endswith(f"Question: {rows[5]['question']}\nAnswer:")
    assert it.prompt.rfind(rows[5]["question"]) > it.prompt.rfind("####")  # the item is the last question
    cases = {" 5+6=11.\n#### 11": "11", "#### $1,234.00 dollars": "1234", "so it is 7 then 8.": "8",
             "no digits": None, " 3 apples\nQuestion: 99 bananas": "3", "####-4": "-4", "#### 2.50": "2.5"}
    for text, want in cases.items():
        assert t.extract(text) == want, text
    r = t.evaluate(["#### 11", "The total is 1234", "#### 14"])
    assert [i.correct for i in r.items] == [True, True, False] and r.accuracy == 2 / 3


@pytest.mark.parametrize("content,message", [
    ("not json\n", ":1: not a GSM8K line"),
    ('{"question": "q"}\n', ":1: not a GSM8K line"),
    ('{"question": "q", "answer": "no hashes"}\n', ":1: not a GSM8K line"),
    ('{"question": "q", "answer": "#### 1"}\n', "need more than the 5 few-shot"),
])
def test_gsm8k_malformed_data_is_bad_input(tmp_path, content, message):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(BadInput, match=message):
        GSM8K.from_file(p)
    with pytest.raises(BadInput, match="not found"):
        GSM8K.from_file(tmp_path / "absent.jsonl")


def test_gsm8k_shared_file_loads(shared_dir):
    p = shared_dir / "data" / "gsm8k" / "test.jsonl"
    if not p.exists():
        pytest.skip(f"{p} absent")
    t = get_task("gsm8k", data=p)
    assert len(t.items) == 1319 - 5 and t.items[0].gold.lstrip("-").isdigit()


def test_qa_scoring():
    t = FactQA()
    assert len(t.items) == len(FACTS) >= 30
    assert t.items[0].prompt.endswith("Q: What is the capital of France?\nA:")
    assert t.score(t.extract(" Paris is the capital.\nQ: next"), "Paris")
    assert not t.score(t.extract(" Lyon\nParis"), "Paris")  # only the first line counts
    assert t.score("7 days", "seven|7") and t.score("Seven.", "seven|7") and not t.score("17", "seven|7")
    assert t.score("Leonardo da Vinci", "Leonardo|da Vinci") and not t.score("", "x")


def test_parity_is_exact_text_equality():
    p = Parity(["a", "b", "c"], reference=[" x", " y", " z"])
    r = p.evaluate([" x", " y ", " z"])
    assert [i.correct for i in r.items] == [True, False, True]


class DictClient:
    """A fake Client answering from a function of the prompt."""

    def __init__(self, fn):
        self.fn = fn

    async def run(self, specs, *, concurrency=None):
        return []

    async def complete(self, prompts, *, max_tokens=256, temperature=0.0, seed=0):
        return [self.fn(p) for p in prompts]


def test_task_run_and_parity_pair_over_fake_clients():
    qa = FactQA()
    res = qa.run(DictClient(lambda p: " Paris" if "France" in p.split("Q:")[-1] else " no idea"))
    assert res.n == len(FACTS) and [i.id for i in res.items if i.correct] == ["qa-00"]
    par = Parity()
    same = asyncio.run(par.arun_pair(DictClient(lambda p: p[-5:]), DictClient(lambda p: p[-5:]), limit=6))
    assert same.n == 6 and same.accuracy == 1.0
    half = asyncio.run(par.arun_pair(DictClient(lambda p: "A"), DictClient(lambda p: "A" if len(p) % 2 else "B")))
    assert 0 < half.accuracy < 1


def test_suite_for_gives_per_item_lists():
    s = suite_for()
    out = s.run(DictClient(lambda p: " Paris"), limit=4, seed=0)
    assert out["qa"] == [1, 0, 0, 0]
    assert set(out) <= {"gsm8k", "qa", "longctx", "gpqa-diamond", "tau2"} and "longctx" in out


# -- CLI against the mock server -------------------------------------------------------------
@pytest.fixture(scope="module")
def answering(tmp_path_factory):
    d = tmp_path_factory.mktemp("ans")
    answers = {q: a.split("|")[0] for q, a in FACTS[:10]}  # knows the first ten facts
    answers.update({f"Tom has {i} apples and buys {i + 1} more. How many apples now?": f"So {2 * i + 1}.\n#### {2 * i + 1}"
                    for i in range(8)})
    (d / "answers.json").write_text(json.dumps(answers))
    argv = lambda port: [sys.executable, "-m", "tools.bench.mock_server", "--port", str(port), "--model", "m",
                         "--answers", str(d / "answers.json")]
    with launch_process(argv, run_dir=d, model="m", ready_line=READY, timeout_s=30) as s:
        yield s


def _cli(capsys, *args):
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_agent_eval_qa_and_gsm8k(answering, tmp_path, capsys):
    code, out, err = _cli(capsys, "eval", "--url", answering.url, "--model", "m", "--task", "qa", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["task"] == "qa" and res["n"] == len(FACTS)
    assert res["accuracy"] == pytest.approx(10 / len(FACTS)) and len(res["items"]) == len(FACTS)
    base = tmp_path / "base.json"
    base.write_text(out)
    p, _ = _gsm_file(tmp_path)
    code, out, err = _cli(capsys, "eval", "--url", answering.url, "--model", "m", "--task", "gsm8k",
                          "--data", str(p), "--limit", "2", "--json")
    assert code == 0 and json.loads(out)["accuracy"] == 0.5 and json.loads(out)["n"] == 2  # 1,234 vs 13
    code, out, err = _cli(capsys, "eval", "--url", answering.url, "--model", "m", "--task", "qa",
                          "--baseline", str(base))
    assert code == 0 and "accuracy 0.312" in out and "non-inferior" in out


def test_agent_eval_parity_against_itself(answering, capsys):
    code, out, err = _cli(capsys, "eval", "--url", answering.url, "--model", "m", "--task", "parity",
                          "--limit", "5", "--reference-url", answering.url, "--json")
    assert code == 0 and json.loads(out)["accuracy"] == 1.0 and json.loads(out)["n"] == 5


@pytest.mark.parametrize("args,message", [
    (["--url", "http://127.0.0.1:1", "--model", "m", "--task", "qa"], "cannot reach"),
    (["--model", "zz", "--task", "qa"], "model 'zz' is not served"),
    (["--model", "m", "--task", "mmlu"], "unknown eval task 'mmlu'; allowed: gpqa-diamond, gsm8k, longctx, parity, qa, tau2"),
    (["--model", "m", "--task", "parity"], "needs --reference-url"),
    (["--model", "m", "--task", "gsm8k", "--data", "/no/file.jsonl"], "not found"),
])
def test_agent_eval_bad_input(answering, capsys, tmp_path, args, message):
    if "--url" not in args:
        args = ["--url", answering.url] + args
    code, out, err = _cli(capsys, "eval", *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_agent_eval_malformed_data_file(answering, capsys, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    code, out, err = _cli(capsys, "eval", "--url", answering.url, "--model", "m", "--task", "gsm8k",
                          "--data", str(bad))
    assert code == 2 and "bad.jsonl:1: not a GSM8K line" in err
