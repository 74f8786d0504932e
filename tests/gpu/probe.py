"""Device call 1 of issue 7: read the machine, ground the adapter, measure the ceilings, make the
test model, compare the MoE experts implementations offline, and smoke-test the loop.

Each section writes its own file under --out and survives the failure of the others.
    python -m tests.gpu.probe --out $OUT --tokenizer .tok
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

MODELS = {"glm_moe_dsa": Path("/tmp/glm52-mini"), "glm4_moe": Path("/tmp/glm45-mini")}
MODEL = MODELS["glm_moe_dsa"]
DEVICE = "cuda"  # --device cpu: a CPU rehearsal with --size tiny


def sh(cmd: str, timeout: int = 120) -> str:
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout)
    return f"$ {cmd}\n{r.stdout}{r.stderr}\n"


def section(name: str):
    def wrap(fn):
        def run(*a, **kw):
            t0 = time.time()
            print(f"== {name}", flush=True)
            try:
                out = fn(*a, **kw)
                print(f"== {name} done in {time.time() - t0:.1f} s", flush=True)
                return out
            except Exception:  # noqa: BLE001  one broken section must not cost the others
                traceback.print_exc()
                print(f"== {name} FAILED after {time.time() - t0:.1f} s", flush=True)
                return None
        return run
    return wrap


@section("environment and the server's CLI")
def environment(out: Path) -> None:
    tf = "python3 -c 'import transformers, os; print(os.path.dirname(transformers.__file__))'"
    root = subprocess.run(tf, shell=True, capture_output=True, text=True).stdout.strip()
    text = sh("nvidia-smi; python3 -V; python3 -c 'import torch, transformers, triton; "
              "print(torch.__version__, torch.version.cuda, transformers.__version__, triton.__version__, "
              "torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).multi_processor_count)'")
    text += sh("python3 -m pip list 2>/dev/null | grep -iE '^(fastapi|uvicorn|openai|pydantic|starlette|accelerate|"
               "kernels|flash|bitsandbytes|deep.gemm|sonic|langgraph|optuna) '")
    (out / "env.txt").write_text(text)
    help_ = sh("python3 -m transformers.cli.transformers serve --help", timeout=120)
    src = sh(f"grep -rn 'Application startup complete\\|logger.warning(f\"Loading\\|Request received\\|"
             f"cb_worker_dead\\|Unexpected fields in the request' {root}/cli/serving/*.py {root}/cli/serve.py | head -20")
    src += sh(f"grep -n '_global_mapping' -A6 {root}/integrations/moe.py | head -8")
    src += sh(f"grep -n 'VALID_ATTN_IMPLEMENTATIONS = ' {root}/cli/serving/model_manager.py")
    src += sh(f"grep -n 'def get_correct_experts_implementation' -A3 {root}/modeling_utils.py")
    src += sh("python3 -c 'import transformers; print(hasattr(transformers, \"GlmMoeDsaForCausalLM\"), "
              "hasattr(transformers, \"Glm4MoeForCausalLM\"))'")
    (out / "serve_help.txt").write_text(help_ + src)


@section("copy bandwidth and bf16 matrix rate")
def ceilings(out: Path) -> dict:
    import torch
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731

    def timed(fn, reps: int) -> list[float]:
        ts = []
        for i in range(reps):
            a, b = ev(), ev()
            a.record()
            fn(i)
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b) / 1e3)
        return ts

    g = torch.Generator(device="cuda").manual_seed(0)
    n = 1 << 30  # 1 Gi bf16 elements = 2 GiB per buffer, far past the 60 MB L2
    srcs = [torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2)]
    dst = torch.empty_like(srcs[0])
    copy = lambda i: dst.copy_(srcs[i % 2])  # noqa: E731
    timed(copy, 3)
    tc = timed(copy, 20)
    bw = 2 * srcs[0].numel() * 2 / statistics.median(tc)  # bytes read + written
    del srcs, dst
    m = 8192
    As = [torch.randn(m, m, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)]
    Bs = [torch.randn(m, m, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3)]
    mm = lambda i: torch.mm(As[i % 3], Bs[(i + 1) % 3])  # noqa: E731
    timed(mm, 5)
    tm = timed(mm, 30)
    tf = 2 * m ** 3 / statistics.median(tm) / 1e12
    res = {"copy_tb_s": bw / 1e12, "copy_bytes_per_rep": 2 * n * 2, "copy_reps_s": tc,
           "bf16_mm_tflops": tf, "mm_n": m, "mm_reps_s": tm, "spread_copy": (max(tc) - min(tc)) / statistics.median(tc),
           "spread_mm": (max(tm) - min(tm)) / statistics.median(tm),
           "method": "torch CUDA events; random data; warm-up then median of repeats; rotating inputs"}
    (out / "hw.json").write_text(json.dumps(res, indent=1))
    print(f"copy {res['copy_tb_s']:.2f} TB/s, bf16 mm {tf:.0f} TFLOP/s", flush=True)
    del As, Bs
    torch.cuda.empty_cache()
    return res


@section("make the test model")
def make_model(out: Path, tokenizer: Path, arch: str, size: str) -> dict:
    from tests.gpu.make_model import make
    info = make(MODELS[arch], tokenizer, size=size, seed=0, arch=arch, device=DEVICE)
    (out / f"model-{arch}.json").write_text(json.dumps(info, indent=1))
    print(info, flush=True)
    return info


@section("offline: experts implementations, attention, dtype, batching (greedy parity and speed)")
def offline(out: Path, items: int, tokens: int, arch: str, full: bool) -> dict:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tools.evals.context_parity import prompts
    model_dir = MODELS[arch]
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    ps = prompts(items)
    sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
    res: dict = {"items": items, "tokens": tokens, "variants": {}}

    def load(**kw):
        return AutoModelForCausalLM.from_pretrained(model_dir, device_map=DEVICE, **kw).eval()

    def greedy_each(model) -> tuple[list[list[int]], float]:
        outs, t0 = [], time.time()
        for p in ps:
            ids = tok(p, return_tensors="pt").to(DEVICE)
            g = model.generate(**ids, max_new_tokens=tokens, do_sample=False, pad_token_id=tok.pad_token_id)
            outs.append(g[0, ids["input_ids"].shape[1]:].tolist())
        sync()
        return outs, time.time() - t0

    def batched(model, n: int, new: int) -> tuple[list[list[int]], float]:
        enc = tok((ps * ((n + len(ps) - 1) // len(ps)))[:n], return_tensors="pt", padding=True).to(DEVICE)
        model.generate(**enc, max_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)  # warm-up
        sync()
        t0 = time.time()
        g = model.generate(**enc, max_new_tokens=new, do_sample=False, pad_token_id=tok.pad_token_id)
        sync()
        return [r[enc["input_ids"].shape[1]:].tolist() for r in g], time.time() - t0

    def agree(a, b) -> dict:
        return {str(k): sum(x[:k] == y[:k] for x, y in zip(a, b)) / len(a) for k in (4, 8, 16, tokens)}

    variants = [("reference grouped_mm/sdpa/bf16", {}), ("experts batched_mm", {"experts_implementation": "batched_mm"}),
                ("experts eager", {"experts_implementation": "eager"}),
                ("experts deepgemm", {"experts_implementation": "deepgemm"}),
                ("experts sonicmoe", {"experts_implementation": "sonicmoe"}),
                ("attention eager", {"attn_implementation": "eager"}), ("dtype float16", {"dtype": torch.float16}),
                ("dtype float32", {"dtype": torch.float32})]
    if not full:  # the MoE kernels only
        variants = [v for v in variants if v[0].startswith(("reference", "experts b", "experts e"))]
    ref = None
    for name, kw in variants:
        t0 = time.time()
        try:
            model = load(**kw)
            impl = getattr(model.config, "_experts_implementation", None)
            greedy_each(model)  # warm-up pass (kernels, allocator)
            outs, secs = greedy_each(model)
            v = {"experts_implementation": impl, "attn": model.config._attn_implementation,
                 "batch1_s_per_token": secs / (items * tokens)}
            if ref is None:
                ref = outs
                res["reference_outputs"] = outs
                b_outs, _ = batched(model, items, tokens)
                res["variants"]["reference, batched (left-padded, batch %d)" % items] = {"agree": agree(ref, b_outs)}
            v["agree"] = agree(ref, outs)
            if name.startswith(("reference", "experts")):
                _, bsecs = batched(model, 64 if DEVICE == "cuda" else 4, 32 if DEVICE == "cuda" else 4)
                v["batch64_tok_s"] = (64 * 32 if DEVICE == "cuda" else 16) / bsecs
            res["variants"][name] = v
            del model
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
        except Exception as e:  # noqa: BLE001  a missing kernel package is a finding, not a crash
            res["variants"][name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
        res["variants"][name]["load_and_run_s"] = round(time.time() - t0, 1)
        print(name, json.dumps({k: v for k, v in res["variants"][name].items()}), flush=True)
        (out / f"offline-{arch}.json").write_text(json.dumps(res, indent=1))
    return res


@section("loop smoke test (baseline + one trial)")
def smoke(out: Path, budget: int, arch: str) -> None:
    run = Path("/tmp/smoke")
    cmd = [sys.executable, "-m", "tests.gpu.loop", "--model-dir", str(MODELS[arch]), "--run-dir", str(run), "--trials", "2",
           "--time-budget", str(budget), "--requests", "8", "--duration", "4", "--start-rps", "2", "--max-points", "4",
           "--bisect", "0",
           "--input-len", "256", "--output-len", "64", "--parity-items", "12"]
    try:
        subprocess.run(cmd, timeout=budget + 60, env=os.environ)
    finally:
        subprocess.run(f"tar czf {out}/smoke.tar.gz --exclude='*.safetensors' -C /tmp smoke", shell=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default=".tok")
    ap.add_argument("--smoke-arch", default="glm4_moe", help="the model the loop smoke test serves")
    ap.add_argument("--items", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=24)
    ap.add_argument("--smoke-budget", type=int, default=150)
    ap.add_argument("--size", default="gpu")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: env,hw,offline,smoke")
    a = ap.parse_args()
    out = Path(a.out)
    global DEVICE
    DEVICE = a.device
    out.mkdir(parents=True, exist_ok=True)
    skip = set(a.skip.split(","))
    t0 = time.time()
    if "env" not in skip:
        environment(out)
    if "hw" not in skip:
        ceilings(out)
    for arch in MODELS:
        make_model(out, Path(a.tokenizer), arch, a.size)
    if "offline" not in skip:
        offline(out, a.items, a.tokens, "glm_moe_dsa", True)
        offline(out, a.items, a.tokens, "glm4_moe", False)
    if "smoke" not in skip:
        smoke(out, a.smoke_budget, a.smoke_arch)
    print(f"probe done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
