"""Is our load generator the bottleneck? (issue 3, acceptance 3)

A local mock OpenAI server (tools/bench/mock_server.py) streams tokens as fast as it can on its
own core; the load generator runs pinned to one other core (taskset). We drive it with
`agent bench` and, when `--vllm-python` names an interpreter with vLLM installed, with vLLM's
own `vllm.benchmarks.serve`, in the same run, interleaved. Reported per client: sustained
requests/s, streamed tokens/s, and TTFT overhead = measured TTFT - the mock's fixed delay
before the first token (`--ttft-s`), i.e. what the client adds to every TTFT it reports.

    python tests/perf/loadgen_overhead.py [--vllm-python ~/.cache/inferloop/testbed/venv/bin/python]
        [--tokenizer MODEL_DIR] [--concurrency 64] [--num-prompts 1000] [--output-len 64] [--repeats 3]
        [--out tests/perf/results/loadgen_overhead.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tools.server import launch_process  # noqa: E402

MODEL = "mock"


def pin(core: int | None) -> list[str]:
    return ["taskset", "-c", str(core)] if core is not None and shutil.which("taskset") else []


def ours(url: str, a, tmp: Path, i: int) -> dict:
    argv = pin(a.client_core) + [
        sys.executable, "-c", "from agent.cli import main; main()", "bench", "--url", url, "--model", MODEL,
        "--input-len", str(a.input_len), "--output-len", str(a.output_len), "--concurrency", str(a.concurrency),
        "--num-prompts", str(a.num_prompts), "--warmup", "0", "--single-stream", "0", "--seed", str(i),
        "--records", str(tmp / f"ours-{i}.jsonl"), "--json"]
    if a.tokenizer:
        argv += ["--tokenizer", str(a.tokenizer)]
    r = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"agent bench failed ({r.returncode}):\n{r.stderr[-3000:]}")
    (p,) = json.loads(r.stdout)["sweep"]
    recs = [json.loads(l) for l in (tmp / f"ours-{i}.jsonl").read_text().splitlines()]
    chunks = sum(len(x["token_times_s"]) for x in recs)
    return {"rps": p["rps"], "tok_s": p["tok_s"], "chunks_s": chunks / p["duration_s"], "success": p["success"],
            "ttft_mean_s": p["ttft_mean_s"], "ttft_p50_s": p["ttft_p50_s"], "ttft_p95_s": p["ttft_p95_s"],
            "duration_s": p["duration_s"]}


def theirs(url: str, a, tmp: Path, i: int) -> dict:
    name = f"vllm-{i}.json"
    argv = pin(a.client_core) + [
        str(a.vllm_python), str(Path(__file__).resolve().parent / "loadgen_vllm_shim.py"), "--backend", "vllm", "--base-url", url,
        "--model", MODEL, "--tokenizer", str(a.tokenizer), "--dataset-name", "random",
        "--random-input-len", str(a.input_len), "--random-output-len", str(a.output_len),
        "--random-range-ratio", "0", "--num-prompts", str(a.num_prompts), "--max-concurrency", str(a.concurrency),
        "--request-rate", "inf", "--ignore-eos", "--disable-tqdm", "--seed", str(i),
        "--save-result", "--result-dir", str(tmp), "--result-filename", name]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=1800, env=env)
    if r.returncode != 0:
        raise SystemExit(f"vllm.benchmarks.serve failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")
    d = json.loads((tmp / name).read_text())
    return {"rps": d["request_throughput"], "tok_s": d["output_throughput"],
            "success": d["completed"] / a.num_prompts, "ttft_mean_s": d["mean_ttft_ms"] / 1000,
            "ttft_p50_s": d["median_ttft_ms"] / 1000, "duration_s": d["duration"]}


def summary(runs: list[dict], ttft_s: float) -> dict:
    out = {k: statistics.mean(r[k] for r in runs) for k in ("rps", "tok_s", "ttft_mean_s", "ttft_p50_s")}
    out["rps_runs"] = [round(r["rps"], 2) for r in runs]
    out["ttft_overhead_mean_ms"] = (out["ttft_mean_s"] - ttft_s) * 1000
    out["ttft_overhead_p50_ms"] = (out["ttft_p50_s"] - ttft_s) * 1000
    out["success_min"] = min(r["success"] for r in runs)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vllm-python", type=Path, help="interpreter with vLLM (compares vllm.benchmarks.serve)")
    ap.add_argument("--tokenizer", type=Path, help="model dir with tokenizer.json (needed with --vllm-python)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--num-prompts", type=int, default=1000)
    ap.add_argument("--input-len", type=int, default=32)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--ttft-s", type=float, default=0.05, help="the mock's fixed delay before the first token")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--light-prompts", type=int, default=100, help="requests of the concurrency-1 run")
    ap.add_argument("--client-core", type=int, default=0)
    ap.add_argument("--server-core", type=int, default=1)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "loadgen_overhead.json")
    a = ap.parse_args()
    if a.vllm_python and not a.tokenizer:
        raise SystemExit("--vllm-python needs --tokenizer (vLLM's random dataset tokenizes prompts)")
    tmp = Path(tempfile.mkdtemp(prefix="loadgen-"))
    mock = lambda port: pin(a.server_core) + [sys.executable, "-m", "tools.bench.mock_server", "--port", str(port),
                                              "--model", MODEL, "--ttft-s", str(a.ttft_s)]
    res: dict = {"ours": [], "vllm": [], "ours_light": [], "vllm_light": []}
    # Light load (one request at a time): the TTFT the client adds when it is not saturated.
    light = argparse.Namespace(**{**vars(a), "concurrency": 1, "num_prompts": a.light_prompts})
    with launch_process(mock, run_dir=tmp, model=MODEL, ready_line="Application startup complete.",
                        timeout_s=60, cwd=REPO) as server:
        for i in range(a.repeats):  # interleaved so machine drift hits both alike
            order = [("ours", ours), ("vllm", theirs)] if i % 2 == 0 else [("vllm", theirs), ("ours", ours)]
            for name, fn in order:
                if name == "vllm" and not a.vllm_python:
                    continue
                for tag, args in (("", a), ("_light", light)):
                    r = fn(server.url, args, tmp, i)
                    res[name + tag].append(r)
                    print(f"[{i}] {name + tag:11s} {r['rps']:8.1f} req/s {r['tok_s']:9.0f} tok/s "
                          f"ttft mean {r['ttft_mean_s'] * 1000:6.1f} ms success {r['success']:.0%}", file=sys.stderr)
    result = {
        "what": "load generator overhead against a mock OpenAI server streaming as fast as it can",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "loadavg_1m_at_end": os.getloadavg()[0], "platform": platform.platform(), "python": platform.python_version(),
                    "client_core": a.client_core, "server_core": a.server_core},
        "workload": {k: getattr(a, k) for k in ("concurrency", "num_prompts", "input_len", "output_len", "ttft_s",
                                                 "repeats", "light_prompts")},
        "ours": summary(res["ours"], a.ttft_s), "ours_runs": res["ours"],
        "ours_light": summary(res["ours_light"], a.ttft_s),
    }
    if res["vllm"]:
        result["vllm"] = summary(res["vllm"], a.ttft_s)
        result["vllm_runs"] = res["vllm"]
        result["vllm_light"] = summary(res["vllm_light"], a.ttft_s)
        result["ours_over_vllm_rps"] = result["ours"]["rps"] / result["vllm"]["rps"]
        result["ours_over_vllm_tok_s"] = result["ours"]["tok_s"] / result["vllm"]["tok_s"]
        result["ours_sustains_at_least_vllm_rate"] = result["ours_over_vllm_rps"] >= 1.0
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if not k.endswith("_runs")}, indent=1))


if __name__ == "__main__":
    main()
