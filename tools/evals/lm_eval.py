"""lm-evaluation-harness as an eval backend: the field's reference, against any OpenAI-compatible
server through its `local-completions` model (as the ATOM recipes report GSM8K).

`gsm8k` runs from local files only: a task definition written next to split files cut from the
project's GSM8K JSONL, with lm-eval's own gsm8k prompt, stop sequences, filters and metric, and the
project's few-shot examples (the file's first five lines, in order), so both harnesses send the
same prompts for the same items and the scores can be compared item by item. Any other task name is
the harness's (gpqa_diamond_zeroshot, mmlu, ...), fetched from the Hugging Face hub as lm-eval does:
it needs network access.

Install: `pip install 'inferloop[evals]'` (lm-eval with its API extra).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from tools.errors import BadInput
from tools.evals.gsm8k import SHOTS, gold_of, load
from tools.evals.stats import accuracy
from tools.evals.tasks import EvalResult, ItemResult

LOCAL_GSM8K = "inferloop_gsm8k"  # our local definition's name in lm-eval's registry
FILTER = "strict-match"  # the number after '####': GSM8K's own answer format, lm-eval's first filter
MAX_TOKENS = 256  # as tools/evals/gsm8k.py, so both harnesses cut generations at the same length

# lm-eval's tasks/gsm8k/gsm8k.yaml (v3.0), with local data files and the first-five-lines shots.
GSM8K_YAML = """task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    shots: {shots}
    test: {test}
output_type: generate_until
fewshot_split: shots
test_split: test
fewshot_config:
  sampler: first_n
num_fewshot: {shots_n}
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
target_delimiter: " "
fewshot_delimiter: "\\n\\n"
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
    ignore_case: true
    ignore_punctuation: false
    regexes_to_ignore: [",", "\\\\$", "(?s).*#### ", "\\\\.$"]
generation_kwargs:
  until: ["Question:", "</s>", "<|im_end|>"]
  do_sample: false
  temperature: 0.0
  max_gen_toks: {max_tokens}
repeats: 1
filter_list:
  - name: "strict-match"
    filter:
      - function: "regex"
        regex_pattern: "#### (\\\\-?[0-9\\\\.\\\\,]+)"
      - function: "take_first"
  - name: "flexible-extract"
    filter:
      - function: "regex"
        group_select: -1
        regex_pattern: "(-?[$0-9.,]{{2,}})|(-?[0-9]+)"
      - function: "take_first"
metadata:
  version: 3.0
"""


def available() -> bool:
    try:
        import lm_eval  # noqa: F401
        return True
    except ImportError:
        return False


def need() -> None:
    if not available():
        raise BadInput("--harness lm-eval needs lm-evaluation-harness: pip install 'inferloop[evals]' "
                       "(or pip install 'lm-eval[api]')")


def write_gsm8k_task(folder: Path, data: Path | str, limit: int | None = None) -> str:
    """The local task definition and its split files in `folder`; returns the task name. Items keep
    their line number, so their ids are the project's (gsm8k-0042) and runs pair up item by item."""
    rows = load(data)
    folder.mkdir(parents=True, exist_ok=True)
    test = rows[SHOTS:SHOTS + limit] if limit else rows[SHOTS:]
    for name, part in (("shots", rows[:SHOTS]), ("test", test)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    (folder / f"{LOCAL_GSM8K}.yaml").write_text(GSM8K_YAML.format(
        name=LOCAL_GSM8K, shots=json.dumps(str(folder / "shots.jsonl")), test=json.dumps(str(folder / "test.jsonl")),
        shots_n=SHOTS, max_tokens=MAX_TOKENS))
    return LOCAL_GSM8K


def model_args(url: str, model: str, *, concurrency: int = 8, timeout_s: float = 3600.0) -> dict:
    """local-completions against the server: plain-text prompts (no tokenizer download: the server
    tokenizes), no chat template, a few requests in flight."""
    return {"base_url": url.rstrip("/") + "/v1/completions", "model": model, "tokenizer_backend": "none",
            "tokenized_requests": False, "num_concurrent": concurrency, "max_retries": 3, "timeout": int(timeout_s)}


def _item_id(task: str, doc_id: int, doc: dict) -> str:
    if task == LOCAL_GSM8K and "line" in doc:
        return f"gsm8k-{int(doc['line']):04d}"
    return f"{task}-{doc_id:04d}"


def to_result(task: str, out: dict, name: str, filt: str = FILTER) -> EvalResult:
    """lm-eval's simple_evaluate output -> the project's EvalResult (per item, in doc order).
    Pure: the samples carry each item's filtered answer and its exact_match."""
    samples = [s for s in (out.get("samples") or {}).get(task, []) if s.get("filter") == filt]
    if not samples:
        have = sorted({s.get("filter") for s in (out.get("samples") or {}).get(task, [])})
        raise BadInput(f"lm-eval returned no samples for {task!r} under filter {filt!r} (have: {have})")
    samples.sort(key=lambda s: s["doc_id"])
    metric = next((k for k in samples[0] if k in ("exact_match", "acc")), None)
    if metric is None:
        raise BadInput(f"lm-eval task {task!r} reports no exact_match or acc per sample")
    items = []
    for s in samples:
        resp = s.get("resps") or [[""]]
        text = resp[0][0] if resp and isinstance(resp[0], list) else str(resp[0])
        ans = s.get("filtered_resps") or [None]
        doc = s.get("doc") or {}
        gold = gold_of(doc["answer"]) if "answer" in doc and "####" in str(doc["answer"]) else str(s.get("target"))
        items.append(ItemResult(id=_item_id(task, s["doc_id"], doc), output=str(text),
                                answer=None if ans[0] in (None, "[invalid]") else str(ans[0]), gold=gold,
                                correct=bool(s[metric])))
    acc, se = accuracy([i.correct for i in items])
    reported = (out.get("results") or {}).get(task, {})
    return EvalResult(task=name, n=len(items), accuracy=acc, stderr=se, items=items,
                      settings={"harness": "lm-eval", "lm_eval_task": task, "filter": filt, "metric": metric,
                                "lm_eval_reported": {k: float(v) for k, v in reported.items()
                                                     if isinstance(v, (int, float)) and not isinstance(v, bool)}})


def evaluate(url: str, model: str, task: str, *, data: Path | str | None = None, limit: int | None = None,
             seed: int = 0, concurrency: int = 8) -> tuple[str, dict]:
    """(lm-eval task name, simple_evaluate's output) for one task against the server at `url`.
    `gsm8k` is the local definition over `data` (default: the shared GSM8K file) and never touches
    the hub; any other name is lm-eval's own."""
    need()
    from tools.evals import shared_gsm8k
    with tempfile.TemporaryDirectory(prefix="lm-eval-") as tmp:
        include, name = None, task
        if task == "gsm8k":
            name = write_gsm8k_task(Path(tmp), data or shared_gsm8k(), limit)
            include = tmp
            # Local files only: the json builder needs no hub, and none must be asked.
            os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        out = _evaluate(url, model, name, include=include, limit=None if include else limit, seed=seed,
                        concurrency=concurrency)
    return name, out


def run(url: str, model: str, task: str, **kw) -> EvalResult:
    """One task through lm-eval, as the project's EvalResult (evaluate's arguments)."""
    name, out = evaluate(url, model, task, **kw)
    return to_result(name, out, task)


def prompts(out: dict, name: str, filt: str = FILTER) -> list[str]:
    """The prompt text lm-eval sent for each item, in doc order."""
    samples = sorted((s for s in out["samples"][name] if s.get("filter") == filt), key=lambda s: s["doc_id"])
    return [s["arguments"][0][0] if isinstance(s["arguments"], (list, tuple))
            else s["arguments"]["gen_args_0"]["arg_0"] for s in samples]


def _evaluate(url, model, name, *, include, limit, seed, concurrency) -> dict:
    import lm_eval
    from lm_eval.tasks import TaskManager
    tm = TaskManager(include_path=include) if include else TaskManager()
    if name not in tm.all_tasks:
        raise BadInput(f"lm-eval knows no task {name!r} (`lm-eval ls tasks` lists them)")
    out = lm_eval.simple_evaluate(model="local-completions", model_args=model_args(url, model, concurrency=concurrency),
                                  tasks=[name], task_manager=tm, limit=limit, log_samples=True,
                                  random_seed=seed, numpy_random_seed=seed, fewshot_random_seed=seed,
                                  apply_chat_template=False, bootstrap_iters=0)
    if out is None:
        raise BadInput(f"lm-eval returned nothing for {name!r}")
    return out


class Suite:
    """The loop's gate through lm-eval (`measure.harness: lm-eval`): Suite.run(client, ...) ->
    {task: per-item 0/1}; the client is the running server's HTTP client (its url and model)."""

    class _Named:
        def __init__(self, name: str):
            self.name = name

    def __init__(self, tasks: list[str], *, data: Path | str | None = None, concurrency: int = 8):
        self.tasks = [self._Named(t) for t in tasks]
        self.data, self.concurrency = data, concurrency

    def run(self, client, *, limit: int, seed: int = 0) -> dict[str, list[int]]:
        url, model = getattr(client, "url", None), getattr(client, "model", None)
        if not url or not model:
            raise BadInput("measure.harness lm-eval needs a server reached over HTTP (backend local or docker)")
        return {t.name: run(url, model, t.name, data=self.data, limit=limit, seed=seed,
                            concurrency=self.concurrency).correct() for t in self.tasks}
