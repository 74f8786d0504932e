"""The GPU ground's sandbox: `transformers serve` as a local process on the device's one GPU.

A LocalSandbox with three differences, each forced by the real server:
- config knobs: the MoE experts implementation is read from the checkpoint's config.json, not
  from a flag, so a candidate that sets one is served from a per-launch copy of the model folder
  (weights symlinked, config.json rewritten with the framework adapter's `config_overrides`);
- no `ignore_eos` in requests (the server answers 422 to fields outside OpenAI's schema); the test
  model has EOS switched off instead, so every request still generates `max_tokens`;
- a warm-up after ready: the server builds its continuous-batching worker, CUDA graphs and
  compiled kernels on the first requests, and the first sweep point must not pay for that. A
  warm-up that fails (e.g. the batching worker dies) is a launch failure with the log's diagnosis.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

from sandboxes import registry
from sandboxes.local import LocalSandbox, NotSupported
from tools.errors import BadInput
from tools import frameworks, logs
from tools.bench.workload import Workload, schedule
from tools.candidate import Candidate
from tools.evals.context_parity import ParitySuite as ContextParity
from tools.protocols import Diagnosis, LaunchFailure
from tools.server import RunningServer, launch_process


def overlay_model(model_dir: Path, overrides: dict, dest: Path) -> Path:
    """A folder that serves `model_dir` with config.json keys replaced: every other file is a
    symlink (no weight is copied). Returns `model_dir` itself when there is nothing to override."""
    if not overrides:
        return Path(model_dir)
    model_dir, dest = Path(model_dir).resolve(), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for f in model_dir.iterdir():
        link = dest / f.name
        if f.name == "config.json":
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(f)
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg.update(overrides)
    (dest / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return dest


class GpuSandbox(LocalSandbox):
    frameworks = ("transformers",)  # what this ground can serve (the planner reads it)

    def __init__(self, model_dir: Path | str, *, warmup: Workload | None = None, warmup_requests: int = 8,
                 gpus: int = 1, warmup_timeout_s: float = 150.0, **kw):
        kw.setdefault("device", "cuda")
        kw.setdefault("ready_timeout_s", 300.0)
        super().__init__(model_dir, **kw)
        self.warmup = warmup or Workload(input_len=256, output_len=32, prefix_hit=0.0)
        self.warmup_requests = warmup_requests
        self.warmup_timeout_s = warmup_timeout_s
        self.gpus = gpus
        self.launches: list[dict] = []  # launch timings, for the record

    def launch(self, candidate: Candidate, run_dir: Path) -> RunningServer:
        fw = frameworks.get(candidate.framework)
        if fw.name not in self.frameworks:
            raise NotSupported(f"this ground serves {', '.join(self.frameworks)}, not {fw.name}")
        fw.validate(candidate)
        ckpt = self.checkpoint(candidate)
        if candidate.parallel.gpus != self.gpus:
            raise NotSupported(f"this ground has {self.gpus} GPU(s); the candidate asks for {candidate.parallel.gpus}")
        run_dir = Path(run_dir)
        model = overlay_model(ckpt, fw.config_overrides(candidate), run_dir / "models" / candidate.key())
        env = {**self.env, **candidate.env}
        t0 = time.monotonic()
        server = launch_process(
            lambda port: fw.argv(candidate, model=str(model), port=port, host=self.host, python=self.python),
            run_dir=run_dir, model=str(model), ready_line=fw.ready_line, health_path=fw.health_path, env=env,
            host=self.host, port=self.port, timeout_s=self.ready_timeout_s, diagnose=fw.diagnose,
            base_env=self.base_env)
        ready_s = time.monotonic() - t0
        server.client.ignore_eos = False
        try:
            warm_s = self._warm(server)
        except LaunchFailure:
            server.stop()
            raise
        self.launches.append({"run_dir": str(run_dir), "ready_s": round(ready_s, 2), "warmup_s": round(warm_s, 2),
                              "flags": candidate.flags})
        return server

    def _warm(self, server: RunningServer) -> float:
        """Requests of the workload's shape, all at once, until each one comes back whole."""
        t0 = time.monotonic()
        specs = schedule(self.warmup, n=self.warmup_requests, rate=None, seed=12345)
        try:
            recs = asyncio.run(asyncio.wait_for(server.client.run(specs, concurrency=self.warmup_requests),
                                                self.warmup_timeout_s))
        except asyncio.TimeoutError:
            text = server.log_text()
            d = Diagnosis(kind="not_ready", message=f"warm-up requests unfinished after {self.warmup_timeout_s:g} s",
                          evidence=text.splitlines()[-3:], details={"timeout_s": self.warmup_timeout_s})
            raise LaunchFailure(d.message, excerpt=logs.excerpt(text, d), diagnosis=d,
                                log_path=server.log_path) from None
        bad = [r for r in recs if not r.ok]
        if bad:
            text = server.log_text()
            diags = frameworks.get("transformers").diagnose(text)
            d = next((x for x in diags if x.fatal), None) or Diagnosis(
                kind="engine_dead", message=f"warm-up requests failed: {bad[0].error}",
                evidence=[bad[0].error or ""])
            raise LaunchFailure(f"{len(bad)} of {len(recs)} warm-up requests failed: {bad[0].error}",
                                excerpt=logs.excerpt(text, d), diagnosis=d, log_path=server.log_path)
        return time.monotonic() - t0

    def tune_moe(self, candidate: Candidate, run_dir: Path) -> list[Path]:
        raise NotSupported("transformers serve has no MoE kernel tuner; its MoE knob is the experts "
                           "implementation, which the planner screens as a flag")

    def source_tree(self, framework: str, run_dir: Path) -> Path:
        raise NotSupported("patching transformers is not part of this ground")



# ---- `--backend local --framework transformers`: this ground, registered under `local` ---------
def _open(cfg, card, hw) -> GpuSandbox:
    t = cfg.target
    if not t.model_path or getattr(t, "checkpoints", None):
        raise BadInput("--backend local --framework transformers needs --model-path DIR, one checkpoint "
                       "directory (precision is not a phase on this ground)")
    w = cfg.measure.workload  # warm up with the requests the sweep will send
    return GpuSandbox(t.model_path, python=t.python or sys.executable,
                      warmup=Workload(input_len=w.input_len, output_len=w.output_len, prefix_hit=0.0))


def _parity(cfg, run_dir) -> ContextParity:
    # Greedy next-token parity at fixed contexts against the first configuration measured: it
    # judges numerics on any checkpoint, a randomly initialised test model included.
    return ContextParity(run_dir)


# One bf16 checkpoint on one GPU and no MoE tuner: precision, parallelism and MoE tuning are not
# phases here (the experts implementation, this server's MoE knob, is screened with the flags).
PLANNER_SCOPE = {"phases": ("framework", "speculative", "flags"), "gpus": 1}

registry.register(registry.Ground("local", _open, framework="transformers", planner_scope=PLANNER_SCOPE,
                                  suite=_parity, help="transformers serve on this host's GPU"))
