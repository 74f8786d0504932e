"""lm-evaluation-harness as an eval backend (tools/evals/lm_eval.py), against the mock server over
real HTTP on loopback: on the same items and prompts, lm-eval's GSM8K score equals the project's,
item by item; `agent eval --harness lm-eval` and the loop's gate (measure.harness) use it. Local
files only: the hub is never asked (HF_*_OFFLINE is set for the local task)."""
import json
import sys

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'inferloop[evals]')")

from agent.cli import main  # noqa: E402
from tools.bench.client import OpenAIClient  # noqa: E402
from tools.evals import get_task  # noqa: E402
from tools.evals import lm_eval as L  # noqa: E402
from tools.evals.gsm8k import gold_of, load  # noqa: E402
from tools.server import launch_process  # noqa: E402

N = 30


def _answer(i: int, gold: str) -> str:
    """Worked answers in the forms GSM8K outputs take: right, wrong, thousands separators, a
    trailing period, a number after the #### that is not the last one in the text."""
    g = int(float(gold))
    return [f"Half of it is {g}. #### {g}", f"I think {g + 1}. #### {g + 1}", f"So {g:,} in all. #### {g:,}",
            f"That gives #### {g}.", f"#### {g - 2}\nAnother 7 are left."][i % 5]


@pytest.fixture(scope="module")
def gsm(shared_dir, tmp_path_factory):
    data = shared_dir / "data" / "gsm8k" / "test.jsonl"
    if not data.is_file():
        pytest.skip(f"{data} is absent")
    d = tmp_path_factory.mktemp("lm-eval")
    rows = load(data)[5:5 + N]
    (d / "answers.json").write_text(json.dumps({r["question"]: _answer(i, gold_of(r["answer"]))
                                                for i, r in enumerate(rows)}))
    argv = lambda port: [sys.executable, "-m", "tools.bench.mock_server", "--port", str(port), "--model", "m",
                         "--answers", str(d / "answers.json")]
    with launch_process(argv, run_dir=d, model="m", ready_line="Application startup complete.", timeout_s=30) as s:
        yield s, data


def test_lm_eval_scores_gsm8k_as_the_project_does_on_the_same_prompts(gsm):
    server, data = gsm
    name, out = L.evaluate(server.url, "m", "gsm8k", data=data, limit=N, concurrency=4)
    theirs = L.to_result(name, out, "gsm8k")
    task = get_task("gsm8k", data=data)
    ours = task.run(OpenAIClient(server.url, "m"), limit=N)
    assert L.prompts(out, name) == [it.prompt for it in task.items[:N]]  # byte for byte
    assert [i.id for i in theirs.items] == [i.id for i in ours.items]
    assert theirs.correct() == ours.correct()
    assert theirs.accuracy == ours.accuracy == pytest.approx(18 / N)  # the right, comma and period forms
    assert theirs.stderr == pytest.approx(ours.stderr)
    assert theirs.settings["lm_eval_reported"]["exact_match,strict-match"] == pytest.approx(theirs.accuracy)


def test_agent_eval_harness_lm_eval(gsm, capsys):
    server, data = gsm
    with pytest.raises(SystemExit) as e:
        main(["eval", "--harness", "lm-eval", "--task", "gsm8k", "--url", server.url, "--model", "m",
              "--data", str(data), "--limit", "10", "--json"])
    out = capsys.readouterr()
    assert e.value.code == 0, out.err
    res = json.loads(out.out)
    assert res["n"] == 10 and res["accuracy"] == pytest.approx(6 / 10) and res["settings"]["harness"] == "lm-eval"


def test_the_loops_gate_through_lm_eval(gsm):
    from agent.run import default_suite
    from agent.config import Measure, RunConfig, Target
    server, data = gsm
    cfg = RunConfig(target=Target(model="glm-5.2", hw="mi355x"), backend="local",
                    measure=Measure(harness="lm-eval", eval_tasks=["gsm8k"]))
    suite = default_suite(cfg, None, None, sandbox=object())
    assert isinstance(suite, L.Suite) and [t.name for t in suite.tasks] == ["gsm8k"]
    suite.data = data
    got = suite.run(OpenAIClient(server.url, "m"), limit=10)
    ours = get_task("gsm8k", data=data).run(OpenAIClient(server.url, "m"), limit=10)
    assert got == {"gsm8k": ours.correct()}
