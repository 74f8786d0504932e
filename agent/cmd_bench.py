"""Commands of the `agent` CLI: `bench` (serving benchmark of any OpenAI-compatible server) and
`eval` (accuracy tasks against it). Both validate their inputs up front and fail with one line
and exit code 2 (BadInput) on an unreachable URL, an unserved model, a missing tokenizer or a
malformed data file."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Optional

import typer

from agent.errors import BadInput
from tools.cli_values import positive_floats


def bench(
    url: str = typer.Option(..., help="Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000"),
    model: str = typer.Option(..., help="Model name as the server serves it (see GET /v1/models)"),
    tokenizer: Optional[Path] = typer.Option(None, help="Model directory with tokenizer.json: exact prompt "
                                             "token counts (without it, counts are approximate)"),
    input_len: int = typer.Option(1024, min=1, help="Input tokens per request"),
    output_len: int = typer.Option(128, min=1, help="Output tokens per request (generation forced to it)"),
    prefix_hit: float = typer.Option(0.0, min=0.0, max=1.0, help="Fraction of input tokens shared (cacheable)"),
    prefix_groups: int = typer.Option(1, min=1, help="Distinct shared prefixes"),
    rates: Optional[str] = typer.Option(None, help="Poisson arrival rates to sweep, req/s: '0.5,1,2'; 'auto': "
                                        "search for the knee (double from 0.5 req/s until the SLO breaks, then bisect)"),
    concurrency: Optional[str] = typer.Option(None, help="Fixed concurrencies to sweep instead: '1,4,16'"),
    ttft_slo: float = typer.Option(5.0, min=0.0, help="TTFT p95 SLO in seconds (defines the knee)"),
    num_prompts: int = typer.Option(64, min=1, help="Requests per load level"),
    duration: Optional[float] = typer.Option(None, min=0.1, help="Seconds per rate level (n = rate x duration)"),
    repeats: int = typer.Option(1, min=1, help="Runs per level; the median is reported with the spread"),
    warmup: int = typer.Option(2, min=0, help="Warm-up requests before measuring (not reported)"),
    single_stream: int = typer.Option(2, min=0, help="Requests at concurrency 1 for single-stream tok/s (0: skip)"),
    stop_at_break: bool = typer.Option(False, help="Stop the sweep at the first level that misses the SLO"),
    records: Optional[Path] = typer.Option(None, help="JSONL file for raw per-request records "
                                           "(default: logs/bench/<time>/records.jsonl)"),
    seed: int = typer.Option(0),
    as_json: bool = typer.Option(False, "--json", help="Print the BenchResult JSON only"),
    vllm_json: Optional[Path] = typer.Option(None, help="Also write vLLM's `bench serve` result JSON here, one "
                                             "object per load level (as --save-result --append-result), for "
                                             "dashboards that read vLLM's results"),
) -> None:
    """Benchmark a running server: rate sweep (or fixed concurrency), knee under the TTFT SLO,
    single-stream tok/s, raw records as JSONL."""
    from tools.bench.client import OpenAIClient
    from tools.bench.prompts import PromptMaker, load_tokenizer, save_jsonl
    from tools.bench.sweep import sweep
    from tools.bench.workload import Workload

    if bool(rates) == bool(concurrency):
        raise BadInput("give exactly one of --rates or --concurrency")
    auto = rates is not None and rates.strip().lower() == "auto"
    rate_list = "auto" if auto else positive_floats(rates, "--rates") if rates else None
    if auto and repeats > 1:
        raise BadInput("--rates auto measures each rate once while it searches; drop --repeats")
    conc_list = [int(c) for c in positive_floats(concurrency, "--concurrency")] if concurrency else None
    if duration and conc_list:
        raise BadInput("--duration applies to --rates; use --num-prompts with --concurrency")
    maker = PromptMaker(load_tokenizer(tokenizer) if tokenizer else None)
    client = OpenAIClient(url, model)
    client.check()
    w = Workload(input_len=input_len, output_len=output_len, prefix_hit=prefix_hit, prefix_groups=prefix_groups)
    n = (lambda r: max(1, round(r * duration))) if duration else num_prompts
    if auto:  # how many rates the search visits is not known in advance
        per = None
    else:
        per = (sum(n(r) for r in rate_list) if duration else num_prompts * len(rate_list or conc_list)) * repeats
    path = records or Path("logs") / "bench" / time.strftime("%Y%m%d-%H%M%S") / "records.jsonl"
    if vllm_json is not None:
        vllm_json.unlink(missing_ok=True)  # this run's levels only, not an earlier run's

    def on_point(label, point, recs):
        save_jsonl(path, [{**label, **r.to_json()} for r in recs])
        if vllm_json is not None:
            from tools.bench import vllm_json as vj
            conc = 1 if label.get("single_stream") else label.get("concurrency")
            vj.append(vllm_json, vj.result(recs, model_id=model, tokenizer_id=str(tokenizer) if tokenizer else None,
                                           request_rate=label.get("rate"), max_concurrency=conc, ttft_slo_s=ttft_slo))

    from agent import progress
    with progress.task("bench", per and per + warmup + single_stream, "req") as bar:
        client.progress = lambda rec: bar.advance()
        res = asyncio.run(sweep(client, w, ttft_slo_s=ttft_slo, rates=rate_list, concurrencies=conc_list, n=n,
                                repeats=repeats, warmup=warmup, single_stream_n=single_stream, seed=seed,
                                prompt_fn=maker.prompts, stop_after_break=stop_at_break, on_point=on_point))
    res.workload["exact_prompts"] = maker.exact
    if as_json:
        typer.echo(res.model_dump_json())
        return
    typer.echo(f"{'rate':>7} {'conc':>6} {'rps':>7} {'tok/s':>9} {'total':>9} {'ttft p50':>9} {'ttft p95':>9} "
               f"{'tpot p50':>9} {'ok':>5}")
    for p in res.sweep:
        def f(x, fmt="9.3f"):
            return format(x, fmt) if x is not None else "        -"
        typer.echo(f"{f(p.offered_rps, '7.2f')} {p.concurrency:6.1f} {p.rps:7.2f} {p.tok_s:9.1f} {p.total_tok_s:9.1f} "
                   f"{f(p.ttft_p50_s)} {f(p.ttft_p95_s)} {f(p.tpot_p50_s)} {p.success:5.0%}")
    k = res.knee
    typer.echo(f"knee (TTFT p95 <= {ttft_slo:g} s, all ok): "
               + (f"{k.rps:.2f} req/s, {k.tok_s:.1f} tok/s" if k else "none: no level met the SLO"))
    if res.single_stream_tok_s is not None:
        typer.echo(f"single stream: {res.single_stream_tok_s:.1f} tok/s")
    if res.noise:
        typer.echo(f"noise: tok/s spread up to {res.noise['tok_s_rel_spread_max']:.1%} over {repeats} repeats")
    typer.echo(f"records: {path}" + (f"\nvLLM result JSON: {vllm_json}" if vllm_json else ""))


EVAL_HELP = """Run an accuracy task against a running server and print accuracy with its standard error.

Tasks: gsm8k (5-shot, greedy, answer after ####; data: --data FILE, a JSONL of the official test split,
fetched once with `curl -L -o gsm8k-test.jsonl https://raw.githubusercontent.com/openai/grade-school-math/master/grade_school_math/data/test.jsonl`),
qa (short factual questions), parity (greedy outputs compared with --reference-url's, item by item).
--harness lm-eval scores the task with lm-evaluation-harness (its local-completions model, against the
same server; pip install 'inferloop[evals]'): gsm8k runs from the local file with lm-eval's gsm8k prompt,
filters and metric and the same few-shot examples as ours, so the two compare item by item; any other
name is an lm-eval task (gpqa_diamond_zeroshot, mmlu, ...) and needs the Hugging Face hub.
With --baseline FILE (an earlier `agent eval --json` on the same task), also prints the paired
comparison (exact McNemar, paired bootstrap) and the non-inferiority verdict at --margin."""


def eval_cmd(
    url: str = typer.Option(..., help="Base URL of an OpenAI-compatible server"),
    model: str = typer.Option(..., help="Model name as the server serves it"),
    task: str = typer.Option(..., help="gsm8k | qa | parity; with --harness lm-eval, any lm-eval task name"),
    harness: str = typer.Option("inferloop", help="inferloop (the project's tasks) | lm-eval (lm-evaluation-harness's "
                                "local-completions model; gsm8k from local files, other tasks from the HF hub)"),
    limit: Optional[int] = typer.Option(None, min=1, help="Evaluate only the first N items"),
    data: Optional[Path] = typer.Option(None, help="GSM8K test JSONL (default: the shared data folder)"),
    reference_url: Optional[str] = typer.Option(None, help="parity: the reference server's URL"),
    reference_model: Optional[str] = typer.Option(None, help="parity: the reference's model name (default --model)"),
    baseline: Optional[Path] = typer.Option(None, help="An earlier `agent eval --json` result to compare with"),
    margin: float = typer.Option(0.02, min=0.0, max=1.0, help="Non-inferiority margin (absolute accuracy)"),
    seed: int = typer.Option(0),
    as_json: bool = typer.Option(False, "--json", help="Print the result JSON only"),
) -> None:
    from tools.bench.client import OpenAIClient
    from tools.evals import TASKS, get_task
    from tools.evals.stats import compare
    from agent.errors import unknown

    from tools.evals import HARNESSES
    if harness not in HARNESSES:
        raise unknown("harness", harness, HARNESSES)
    if harness == "inferloop" and task not in TASKS:
        raise unknown("eval task", task, TASKS)
    if task == "parity" and not reference_url:
        raise BadInput("--task parity needs --reference-url (the server whose greedy outputs are the reference)")
    base = _load_baseline(baseline, task) if baseline else None
    client = OpenAIClient(url, model)
    if harness == "lm-eval":
        from tools.evals import lm_eval
        lm_eval.need()
        client.check()
        res = lm_eval.run(url, model, task, data=data, limit=limit, seed=seed)
    elif task == "parity":
        client.check()
        ref = OpenAIClient(reference_url, reference_model or model)
        ref.check()
        res = asyncio.run(get_task(task).arun_pair(ref, client, limit=limit, seed=seed))
    else:
        t = get_task(task, data=data)
        client.check()
        from agent import progress
        with progress.task(f"eval {task}", min(limit or len(t.items), len(t.items)), "items") as bar:
            client.progress = lambda rec: bar.advance()
            res = t.run(client, limit=limit, seed=seed)
    out = res.model_dump()
    if base is not None:
        by_id = {i["id"]: int(i["correct"]) for i in base["items"]}
        common = [i for i in res.items if i.id in by_id]
        if not common:
            raise BadInput(f"{baseline} shares no items with this run")
        cmp = compare([by_id[i.id] for i in common], [int(i.correct) for i in common], margin=margin, seed=seed)
        out["comparison"] = cmp.model_dump()
    if as_json:
        typer.echo(json.dumps(out))
        return
    failed = sum(1 for i in res.items if i.error)
    typer.echo(f"{task}: accuracy {res.accuracy:.3f} +/- {res.stderr:.3f} (n={res.n}"
               + (f", {failed} requests failed" if failed else "") + ")")
    if base is not None:
        c = out["comparison"]
        typer.echo(f"vs baseline: {c['verdict']}; McNemar p={c['mcnemar_p']:.3g} (b={c['b']}, c={c['c']})")


eval_cmd.__doc__ = EVAL_HELP


def _load_baseline(path: Path, task: str) -> dict:
    try:
        d = json.loads(Path(path).read_text())
        if d["task"] != task or not isinstance(d["items"], list):
            raise ValueError
        return d
    except FileNotFoundError:
        raise BadInput(f"baseline file {path} not found") from None
    except (ValueError, KeyError, TypeError):
        raise BadInput(f"{path} is not an `agent eval --json` result for task {task!r}") from None


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
    app.command("eval")(eval_cmd)
