"""vLLM's `bench serve` result JSON from our per-request records, so dashboards that read vLLM's
result files read ours.

Field names and definitions as in vllm/benchmarks/serve.py (`benchmark()`'s result and
`main()`'s result_json): run metadata (date, backend, model_id, num_prompts, request_rate,
burstiness, max_concurrency), totals and throughputs, the per-request lists, and
mean/median/std/pNN in milliseconds for ttft, tpot, itl and e2el (as `--percentile-metrics
ttft,tpot,itl,e2el --metric-percentiles 50,90,95,99` writes them). TPOT excludes the first token,
(latency - ttft) / (output tokens - 1); ITL is every gap between streamed chunks. A sweep is one
object per load level, one per line: what `vllm bench serve --save-result --append-result` leaves
after one run per rate. Pure.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from tools.bench.records import RequestRecord

PERCENTILES = (50, 90, 95, 99)


def _stats(name: str, xs: list[float]) -> dict:
    v = xs or [0.0]  # vLLM reports 0 for a metric with no samples (np.mean(x or 0))
    out = {f"mean_{name}_ms": float(np.mean(v)) * 1000, f"median_{name}_ms": float(np.median(v)) * 1000,
           f"std_{name}_ms": float(np.std(v)) * 1000}
    out.update({f"p{p}_{name}_ms": float(np.percentile(v, p)) * 1000 for p in PERCENTILES})
    return out


def _peaks(records: list[RequestRecord], start: float, duration: float) -> tuple[float, int]:
    """vLLM's max_output_tokens_per_s and max_concurrent_requests over one-second buckets."""
    n = max(int(np.ceil(duration)), 1)
    tokens, conc = np.zeros(n), np.zeros(n + 1)
    for r in records:
        for t in r.token_times_s:
            b = int(t - start)
            if 0 <= b < n:
                tokens[b] += 1
        lo, hi = int(r.send_s - start), min(int(r.end_s - start), n)
        conc[lo:hi + 1] += 1
    return float(tokens.max()), int(conc.max())


def result(records: list[RequestRecord], *, model_id: str, tokenizer_id: str | None = None,
           request_rate: float | None = None, max_concurrency: int | None = None,
           ttft_slo_s: float | None = None, date: str | None = None) -> dict:
    """One load level as vLLM's result JSON."""
    if not records:
        raise ValueError("no requests were recorded")
    start = min(r.send_s for r in records)
    duration = max(max(r.end_s for r in records) - start, 1e-9)
    ok = [r for r in records if r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    tpots = [(r.latency_s - r.ttft_s) / (r.output_tokens - 1) for r in ok
             if r.ttft_s is not None and r.output_tokens > 1]
    itls = [[b - a for a, b in zip(r.token_times_s, r.token_times_s[1:])] for r in records]
    total_in = sum(r.input_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    good = sum(1 for r in ok if r.ttft_s is not None and r.ttft_s <= ttft_slo_s) if ttft_slo_s else None
    peak_tok, peak_conc = _peaks(records, start, duration)
    return {
        "date": date or time.strftime("%Y%m%d-%H%M%S"), "endpoint_type": "openai", "backend": "openai",
        "label": None, "model_id": model_id, "tokenizer_id": tokenizer_id or model_id, "num_prompts": len(records),
        "request_rate": request_rate if request_rate is not None else "inf", "burstiness": 1.0,
        "max_concurrency": max_concurrency,
        "duration": duration, "completed": len(ok), "failed": len(records) - len(ok),
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration,
        "request_goodput": good / duration if good is not None else None,
        "output_throughput": total_out / duration, "total_token_throughput": (total_in + total_out) / duration,
        "input_lens": [r.input_tokens for r in records], "output_lens": [r.output_tokens for r in records],
        "ttfts": [r.ttft_s or 0.0 for r in records], "itls": itls, "latencies": [r.latency_s for r in records],
        "start_times": [r.send_s for r in records], "queue_times": [0.0 for _ in records],
        "generated_texts": ["" for _ in records],  # not kept: the records hold timings, not text
        "errors": [r.error or "" for r in records],
        "max_output_tokens_per_s": peak_tok, "max_concurrent_requests": peak_conc, "rtfx": 0.0,
        **_stats("ttft", ttfts), **_stats("tpot", tpots), **_stats("itl", [x for r, xs in zip(records, itls) if r.ok for x in xs]),
        **_stats("e2el", [r.latency_s for r in ok]),
    }


def append(path: Path, obj: dict) -> None:
    """As vLLM's --append-result: a newline between objects, nothing after the last."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as f:
        if f.tell() != 0:
            f.write("\n")
        json.dump(obj, f)


def read(path: Path) -> list[dict]:
    """Every result object in a file written by `append` (or by vLLM with --append-result)."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
