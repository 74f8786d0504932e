"""A small fake ground that obeys the Sandbox/Server/Client protocols and tells the story in
miniature, so the loop can be tested before (and independently of) the simulator:

- vllm serves bf16 but cannot load mxfp4 (launch failure, unsupported quantization);
- atom is fast but loses accuracy on the long-context task;
- sglang's MTP drafting dies on a shape mismatch unless deepseek_nextn.py maps the model's MTP
  layer names, and a draft depth >= 4 dies on a CUDA-only include unless it is ROCm-guarded;
- MoE kernels fall back to a default config (a warning) until a tuned config is installed.
Performance is a capacity in requests/s per candidate; latency grows past it, so the knee moves.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import git

from tools.bench.records import RequestRecord
from tools.candidate import Candidate
from tools.protocols import LaunchFailure

NEXTN = '''from sglang.srt.models.utils import WeightsMapper

hf_to_sglang_mapper = WeightsMapper(orig_to_new_prefix={"model.layers.61.": "model.decoder."})


class DeepseekV3ForCausalLMNextN:
    pass
'''
CUH = '''#pragma once
#include <cuda_runtime.h>
#include "utils.h"

__global__ void fused_multi_step_metadata() {}
'''


class FakeClient:
    def __init__(self, cap: float, speed: float, quality: dict, delay_s: float = 0.0):
        self.cap, self.speed, self.quality, self.delay_s = cap, speed, quality, delay_s

    async def run(self, specs, *, concurrency=None):
        if self.delay_s:
            time.sleep(self.delay_s)  # a measurement takes time (the kill test needs one in flight)
        out = []
        rate = None
        if concurrency is None and len(specs) > 1:
            rate = (len(specs) - 1) / max(specs[-1].arrival_s, 1e-9)
        for s in specs:
            ttft = 0.5 if rate is None or rate <= self.cap else 0.5 + 20 * (rate / self.cap - 1)
            send = s.arrival_s if concurrency is None else 0.0
            if concurrency == 1:
                send = out[-1].end_s if out else 0.0
            first = send + ttft
            end = first + s.output_tokens / self.speed
            out.append(RequestRecord(id=s.id, send_s=send, first_token_s=first, end_s=end,
                                     input_tokens=s.input_tokens, output_tokens=s.output_tokens, ok=True))
        return out

    async def complete(self, prompts, *, max_tokens=256, temperature=0.0, seed=0):
        return ["wrong" if self.quality.get(p.split(":")[0], 0) > (i % 100) / 100 else "ok"
                for i, p in enumerate(prompts)]


class FakeServer:
    url = None

    def __init__(self, client, log, proc=None, pgid_file=None):
        self.client, self._log, self.proc, self.pgid_file = client, log, proc, pgid_file

    def log_text(self):
        return self._log

    def stop(self):
        if self.proc is not None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
            self.pgid_file.unlink(missing_ok=True)
            self.proc = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class FakeSuite:
    tasks = ("gsm8k", "long_context")

    def run(self, client, *, limit, seed):
        import asyncio
        out = {}
        for t in self.tasks:
            texts = asyncio.run(client.complete([f"{t}:{i}" for i in range(100)]))
            out[t] = [1 if x == "ok" else 0 for x in texts]
        return out


class FakeSandbox:
    name = "fake"
    frameworks = ("vllm", "sglang", "atom")

    def __init__(self, card, hw, *, delay_s: float = 0.0, spawn: bool = False, launch_log: Path | None = None):
        self.card, self.hw, self.delay_s, self.spawn, self.launch_log = card, hw, delay_s, spawn, launch_log
        self.clock = 0.0
        self.launches: list[tuple[str, Candidate]] = []

    def elapsed_s(self):
        return self.clock

    def source_tree(self, framework, run_dir):
        t = Path(run_dir) / "src" / framework
        if not t.exists():
            (t / "python/sglang/srt/models").mkdir(parents=True)
            (t / "python/sglang/srt/models/deepseek_nextn.py").write_text(NEXTN)
            (t / "sgl-kernel/csrc/spec").mkdir(parents=True)
            (t / "sgl-kernel/csrc/spec/multi_step_metadata.cuh").write_text(CUH)
            r = git.Repo.init(t)
            r.git.add("-A")
            r.git.commit("-m", "upstream", env={"GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x",
                                                "GIT_COMMITTER_NAME": "u", "GIT_COMMITTER_EMAIL": "u@x"})
        return t

    def tune_moe(self, c, run_dir):
        shape = self.card.moe_shapes(tp=c.parallel.tp)
        p = Path(run_dir) / f"E={shape.E},N={shape.N},device_name={self.hw.device_name}.json"
        p.write_text('{"1": {"BLOCK_SIZE_M": 16}}')
        self.clock += 600
        return [p]

    def launch(self, c: Candidate, run_dir: Path):
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self.clock += 300
        self.launches.append((run_dir.name, c))
        if self.launch_log:
            with open(self.launch_log, "a") as f:
                f.write(f"{c.key()}\n")
        log, fail = self._log(c, run_dir)
        if fail:
            raise LaunchFailure("server exited", excerpt=log)
        proc = pgid_file = None
        if self.spawn:  # a real process group, as a real server would have
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
            from tools import procs
            pgid_file = procs.record(run_dir, proc.pid)  # the tool's own record, as ProcessHandle writes
        cap, speed, quality = self._perf(c)
        return FakeServer(FakeClient(cap, speed, quality, self.delay_s), log, proc, pgid_file)

    # -- behaviour --------------------------------------------------------------------------
    def _spec_depth(self, c):
        f = c.flags
        if f.get("--speculative-algorithm"):
            return int(f.get("--speculative-num-steps") or 1)
        if f.get("--speculative-config"):
            return int(f["--speculative-config"].get("num_speculative_tokens", 1))
        if f.get("--method"):
            return int(f.get("--num-speculative-tokens") or 1)
        return 0

    def _log(self, c, run_dir) -> tuple[str, bool]:
        lines = [f"starting {c.framework}"]
        n = self.card.num_hidden_layers
        if c.framework == "vllm" and c.weights == "mxfp4":
            return "\n".join(lines + ["ValueError: quantization method mxfp4 is not supported for GlmMoeDsaForCausalLM"]), True
        depth = self._spec_depth(c)
        if c.framework == "sglang" and depth:
            tree = self.source_tree("sglang", run_dir)
            src = (tree / "python/sglang/srt/models/deepseek_nextn.py").read_text()
            d = next(node.value for node in ast.walk(ast.parse(src))
                     if isinstance(node, ast.keyword) and node.arg == "orig_to_new_prefix")
            mapping = {ast.literal_eval(k): ast.literal_eval(v) for k, v in zip(d.keys, d.values)}
            if c.weights == "mxfp4" and mapping.get(f"model.layers.{n}.eh_proj") != "model.eh_proj":
                return "\n".join(lines + [
                    f"RuntimeError: Attempted to load weight (torch.Size([6144, 12288])) into parameter "
                    f"(torch.Size([6144, 6144])) for model.layers.{n}.eh_proj.weight"]), True
            if depth >= 4:
                cuh = (tree / "sgl-kernel/csrc/spec/multi_step_metadata.cuh").read_text()
                if not re.search(r"#ifdef USE_ROCM\n#include <hip/hip_runtime.h>\n#else\n#include <cuda_runtime.h>\n#endif", cuh):
                    line = cuh.splitlines().index("#include <cuda_runtime.h>") + 1
                    return "\n".join(lines + [f"sgl-kernel/csrc/spec/multi_step_metadata.cuh:{line}:10: fatal error: "
                                              "'cuda_runtime.h' file not found"]), True
        if self.card.is_moe:
            env = c.env.get("SGLANG_MOE_CONFIG_DIR") if c.framework == "sglang" else None
            if env and c.moe_configs:
                lines.append(f"Using MoE kernel config from {c.moe_configs[0]}.")
            else:
                lines.append("Using default MoE kernel config. Performance might be sub-optimal! Config file "
                             "not found at /sgl/configs/E=256,N=512,device_name=AMD_Instinct_MI355X.json, you can create them with https://x")
        lines.append("The server is fired up and ready to roll!")
        return "\n".join(lines), False

    def _perf(self, c) -> tuple[float, float, dict]:
        cap = {"vllm": 1.0, "sglang": 1.1, "atom": 1.4}[c.framework]
        speed = 50.0
        quality = {"long_context": 0.3} if c.framework == "atom" else {}
        if c.weights == "mxfp4":
            cap, speed = cap * 1.5, speed * 1.3
        d = self._spec_depth(c)
        if d:
            cap, speed = cap * (1 + 0.05 * d), speed * (1 + 0.4 * d)
        if c.flags.get("--kv-cache-dtype") == "fp8_e4m3":
            cap *= 1.1
        if c.flags.get("--disable-radix-cache"):
            cap *= 0.6
        if c.parallel.tp == 4 and c.parallel.dp == 2:
            cap, speed = cap * 1.3, speed * 0.85
        if c.parallel.tp < 4:
            cap *= 0.5
        if c.moe_configs:
            cap *= 1.35
        return cap, speed, quality
