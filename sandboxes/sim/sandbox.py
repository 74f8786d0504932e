"""SimSandbox: the simulated 8-GPU node behind the Sandbox protocol.

launch() parses the candidate's real command line with the framework adapter, checks the
launch against the node (memory) and against the run's framework source tree (what a patch can
change), writes a launch log in the framework's style, and either returns a server whose client
simulates requests, or raises LaunchFailure with the adapter's own diagnosis of that log.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np

from sandboxes.sim import frameworks as simfw
from sandboxes.sim import moe as simmoe
from sandboxes.sim.accuracy import Answerer, Skill
from sandboxes.sim.engine import Engine
from sandboxes.sim.logs import LogWriter, traceback, usage
from sandboxes.sim.perf import (SimConfig, efficiency, kv_capacity_tokens, step_time,
                                weight_bytes_per_gpu)
from tools import frameworks
from tools.bench.records import RequestRecord, RequestSpec
from tools.candidate import Candidate
from tools.frameworks.base import FlagError
from tools.frameworks.signatures import primary
from tools.hardware import HardwareProfile, get_hardware
from tools.models import ModelCard, get_model
from tools.protocols import LaunchFailure

SOURCE = Path(__file__).parent / "source"
_GIT_ENV = {"GIT_AUTHOR_NAME": "sim", "GIT_AUTHOR_EMAIL": "sim@localhost", "GIT_COMMITTER_NAME": "sim",
            "GIT_COMMITTER_EMAIL": "sim@localhost", "HOME": "/tmp", "PATH": "/usr/bin:/bin:/usr/local/bin"}


class SimClient:
    """Client protocol over the simulated engine: records with simulated timestamps."""

    def __init__(self, sandbox: "SimSandbox", cfg: SimConfig, skill: Skill, seed: int):
        self.sb, self.cfg, self.skill, self.seed = sandbox, cfg, skill, seed
        self.runs = 0

    def engine(self) -> Engine:
        self.runs += 1
        rng = np.random.default_rng([self.seed, self.runs])
        return Engine(self.sb.model, self.sb.hw, self.cfg, efficiency(self.cfg.framework, self.sb.hw.vendor, self.cfg.version),
                      rng=rng, noise=self.sb.noise)

    async def run(self, specs: list[RequestSpec], *, concurrency: int | None = None) -> list[RequestRecord]:
        recs = self.engine().run(specs, concurrency=concurrency)
        if recs:
            self.sb.clock += max(r.end_s for r in recs) - min(r.send_s for r in recs)
        return recs

    async def complete(self, prompts: list[str], *, max_tokens: int = 256, temperature: float = 0.0,
                       seed: int = 0) -> list[str]:
        ans = self.sb.answerer()
        out = [ans.answer(p, self.skill, temperature=temperature, seed=seed) for p in prompts]
        # Simulated time: the prompts as one batch of requests at 64 in flight.
        eff = efficiency(self.cfg.framework, self.sb.hw.vendor, self.cfg.version)
        n_tok = sum(len(p) for p in prompts) / 4
        step = step_time(self.sb.model, self.sb.hw, self.cfg, eff, n_decode=min(64, len(prompts)) or 1,
                         decode_ctx=n_tok / max(len(prompts), 1)).seconds
        self.sb.clock += step * max_tokens * max(1, len(prompts) / 64 / self.cfg.dp) * 0.5 + n_tok / 20000
        return out


class SimServer:
    url = None

    def __init__(self, client: SimClient, log: str, log_path: Path):
        self.client, self._log, self.log_path = client, log, log_path

    def log_text(self) -> str:
        return self._log

    def stop(self) -> None:
        pass

    def __enter__(self) -> "SimServer":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class SimSandbox:
    name = "sim"

    def __init__(self, model: str | ModelCard = "glm-5.2", hw: str | HardwareProfile = "mi355x", *,
                 seed: int = 0, noise: float = 0.02, shared_dir: Path | None = None,
                 check_source: bool = True, framework_versions: dict[str, str] | None = None):
        # check_source=False: predict performance as if the framework's source bugs were fixed
        # (`agent estimate`); bad flags and memory are still checked.
        self.check_source = check_source
        # The framework version each launch parses its flags with (None: the newest schema).
        self.framework_versions = dict(framework_versions or {})
        self.model = get_model(model) if isinstance(model, str) else model
        self.hw = get_hardware(hw) if isinstance(hw, str) else hw
        self.seed, self.noise, self.shared_dir = seed, noise, shared_dir
        self.clock = 0.0
        self.launches = 0
        self._answerer: Answerer | None = None

    def version(self, framework: str) -> str | None:
        """The framework version this node's launches parse flags with (None: the newest schema)."""
        return self.framework_versions.get(framework)

    def elapsed_s(self) -> float:
        return self.clock

    # The ground's state across a kill (agent/ledger.py saves it with each finished unit of work):
    # the clock for time budgets, the launch counter for per-launch seeds and log names.
    def ground_state(self) -> dict:
        return {"clock": self.clock, "launches": self.launches}

    def restore_ground(self, state: dict) -> None:
        self.clock, self.launches = float(state.get("clock", 0.0)), int(state.get("launches", 0))

    def answerer(self) -> Answerer:
        if self._answerer is None:
            self._answerer = Answerer.load(self.shared_dir)
        return self._answerer

    # ---- source trees ----------------------------------------------------------------------
    def source_tree(self, framework: str, run_dir: Path) -> Path:
        frameworks.get(framework)  # BadInput for unknown names
        tree = Path(run_dir) / "src" / framework
        if not (tree / ".git").exists():
            shutil.copytree(SOURCE / framework, tree, dirs_exist_ok=True)
            for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", f"{framework} (sim) pristine"]):
                subprocess.run(["git", *args], cwd=tree, check=True, env=_GIT_ENV, capture_output=True)
        return tree

    # ---- MoE tuning ------------------------------------------------------------------------
    def tune_moe(self, candidate: Candidate, run_dir: Path) -> list[Path]:
        p = candidate.parallel
        out = Path(run_dir) / "moe_configs" / f"{candidate.framework}-tp{p.tp}{'-ep' if p.ep else ''}"
        files, seconds = simmoe.tune(candidate.framework, candidate, self.model, self.hw, p.tp, p.ep, out)
        self.clock += seconds
        return files

    # ---- launch ----------------------------------------------------------------------------
    def launch(self, candidate: Candidate, run_dir: Path) -> SimServer:
        fw = frameworks.get(candidate.framework, self.version(candidate.framework))
        run_dir = Path(run_dir)
        tree = self.source_tree(candidate.framework, run_dir)
        self.launches += 1
        log_path = run_dir / "logs" / f"sim-launch-{self.launches:03d}.log"
        n = 0
        while log_path.exists():  # a launch redone after a kill: keep the first log too
            n += 1
            log_path = run_dir / "logs" / f"sim-launch-{self.launches:03d}.redo-{n}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        w = LogWriter(fw.name, self.clock)
        argv = fw.argv(candidate, model=f"/models/{self.model.name}-{candidate.weights}", port=30000)
        try:
            flags = fw.parse_flags(argv[3:])
        except FlagError as e:
            w.raw(usage(fw.prog, fw.module) + "\n" + e.log_line(fw.prog))
            self._fail(fw, w, log_path, seconds=4.0)
        parsed = simfw.to_config(fw.name, flags, candidate, self.model, self.hw)
        cfg = parsed.cfg
        self._boot(fw, candidate, cfg, parsed.notes, tree, w, log_path)
        skill = Skill(weights=cfg.weights, kv_dtype=cfg.kv_dtype, framework=fw.name,
                      indexer_window=simfw.atom_indexer_window(tree) if fw.name == "atom" and self.model.index_topk else None)
        log_path.write_text(w.text())
        seed = self.seed * 1_000_003 + self.launches
        return SimServer(SimClient(self, cfg, skill, seed), w.text(), log_path)

    def _fail(self, fw, w: LogWriter, log_path: Path, *, seconds: float) -> None:
        self.clock += seconds
        text = w.text()
        log_path.write_text(text)
        diag = primary(fw.diagnose(text))
        msg = diag.message if diag else "the server exited during startup"
        raise LaunchFailure(f"{fw.name} failed to start: {msg}", excerpt="\n".join(text.splitlines()[-30:]),
                            diagnosis=diag, log_path=log_path)

    def _boot(self, fw, c: Candidate, cfg: SimConfig, notes: list[str], tree: Path, w: LogWriter,
              log_path: Path) -> None:
        m, hw = self.model, self.hw
        gpus = cfg.tp * cfg.dp
        rank = "DP0 TP0" if cfg.dp > 1 else "TP0"
        w.line(f"server_args={fw.name}({', '.join(f'{k}={v!r}' for k, v in sorted(vars(cfg).items()) if k != 'notes')})")
        for n in notes:
            w.line(n, "WARNING")
        if gpus > hw.gpus_per_node:
            w.raw(f"RuntimeError: tp_size * dp_size = {gpus} GPUs requested but only {hw.gpus_per_node} are visible")
            self._fail(fw, w, log_path, seconds=20.0)
        load_s = 40.0 + weight_bytes_per_gpu(m, cfg) / 2.5e9
        w.tick(15)
        w.line(f"Load weight begin. avail mem={hw.hbm_gb * 0.98:.2f} GB", rank=rank, where="gpu_model_runner.py:2000")
        if c.weights != "bf16":
            w.line(f"Detected quantized checkpoint: quant_method={'quark' if c.weights == 'mxfp4' else 'fp8'}, "
                   f"weights={c.weights}; excluded from quantization: lm_head, model.embed_tokens, "
                   f"model.layers.{m.num_hidden_layers}.*", rank=rank)
        if c.weights == "nvfp4" and hw.is_rocm:
            # NVFP4 (ModelOpt: e4m3 scales per 16 values) runs on NVIDIA Blackwell FP4 kernels; the
            # ROCm builds serve MXFP4 (OCP MX, e8m0 per 32) instead.
            w.raw(f"ValueError: The quantization method modelopt_fp4 is not supported for the current GPU "
                  f"({hw.arch}): it needs NVIDIA compute capability 10.0")
            self._fail(fw, w, log_path, seconds=load_s * 0.2)
        src_ok = not self.check_source
        if fw.name == "vllm" and not src_ok and (err := simfw.vllm_quark_unsupported(tree, m, c.weights)):
            w.line("EngineCore failed to start.", "ERROR", where="core.py:708", rank=rank)
            w.raw(traceback([("/usr/local/lib/python3.12/site-packages/vllm/model_executor/layers/quantization/quark/quark_moe.py", 27, "get_moe_method")], err))
            w.raw("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}")
            self._fail(fw, w, log_path, seconds=load_s * 0.3)
        usable = hw.hbm_gb * 1e9 * cfg.mem_fraction
        if weight_bytes_per_gpu(m, cfg) > usable:
            w.tick(load_s)
            gib = weight_bytes_per_gpu(m, cfg) / 2**30
            dev = "HIP" if hw.is_rocm else "CUDA"
            w.raw(f"torch.OutOfMemoryError: {dev} out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                  f"capacity of {hw.hbm_gb / 1.0737:.2f} GiB; the model's weights need {gib:.2f} GiB per GPU "
                  f"at tp={cfg.tp}.")
            self._fail(fw, w, log_path, seconds=load_s)
        w.tick(load_s)
        w.line(f"Load weight end. type={m.architecture}, dtype=torch.bfloat16, "
               f"mem usage={weight_bytes_per_gpu(m, cfg) / 2**30:.2f} GB.", rank=rank, where="gpu_model_runner.py:2050")
        if cfg.spec in ("mtp", "eagle") and fw.name == "sglang" and m.mtp_layers:
            w.line("Load draft model (NextN) begin.", rank=rank)
            if c.weights == "mxfp4" and not src_ok and (mm := simfw.nextn_mismatch(tree, m)):
                rt, ck, got_model, want = mm
                w.raw(traceback([("/sgl-workspace/sglang/python/sglang/srt/model_loader/loader.py", 412, "load_weights_and_postprocess"),
                                 ("/sgl-workspace/sglang/python/sglang/srt/models/deepseek_v2.py", 2890, "load_weights")],
                                f"ValueError: shape mismatch for {rt}.weight: param [{got_model[0]}, {got_model[1]}] uint8 "
                                f"(mxfp4) vs loaded weight {ck}.weight [{want[0]}, {want[1]}] bfloat16"))
                w.line("Scheduler hit an exception: ValueError: shape mismatch while loading the NextN draft weights", "ERROR", rank=rank)
                w.line("Received sigquit from a child process. It usually means the child failed.", "ERROR")
                self._fail(fw, w, log_path, seconds=load_s + 10)
            w.tick(6)
            if hw.is_rocm and cfg.spec_steps >= 4:
                w.line(f"Compiling fused multi-step metadata kernel (speculative_num_steps={cfg.spec_steps}) with hipcc ...", rank=rank)
                w.tick(25)
                if not src_ok and (err := simfw.rocm_compile_error(tree)):
                    ln, col = int(err.split(":")[1]), int(err.split(":")[2])
                    src = (tree / simfw.MULTI_STEP_CUH).read_text().splitlines()[ln - 1]
                    w.raw(f"{err}\n{ln:>5} | {src}\n      | {' ' * (col - 1)}^\n"
                          f"1 error generated when compiling for {hw.arch}.")
                    w.raw("RuntimeError: Error building extension 'multi_step_metadata'")
                    w.line("Received sigquit from a child process. It usually means the child failed.", "ERROR")
                    self._fail(fw, w, log_path, seconds=load_s + 40)
        cap = kv_capacity_tokens(m, hw, cfg)
        if cap < 4096:
            w.raw("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static." if fw.name == "sglang"
                  else "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.")
            self._fail(fw, w, log_path, seconds=load_s + 20)
        w.line(f"KV Cache is allocated. #tokens: {int(cap)}, KV size: {cap * m.kv_bytes_per_token(cfg.kv_dtype) / 1e9:.2f} GB", rank=rank,
               where="kv_cache_utils.py:1087")
        st = simmoe.state(fw.name, c, m, hw, cfg.tp, cfg.ep, tree, token=min(cfg.max_running, 256) * cfg.verify_tokens)
        if st is not None:
            cfg.moe_tuned = st.tuned
            w.line(st.line, "INFO" if st.tuned else "WARNING", rank=rank, where=st.where)
        if cfg.graphs:
            w.line("Capture cuda graph begin. This can take up to several minutes.", rank=rank)
            w.tick(45)
            w.line("Capture cuda graph end. Time elapsed: 45.12 s.", rank=rank)
        w.line(f"max_total_num_tokens={int(cap)}, chunked_prefill_size={cfg.chunk}, "
               f"max_running_requests={cfg.max_running}, context_len={m.max_position_embeddings}", rank=rank)
        w.raw("INFO:     Started server process [4242]\nINFO:     Waiting for application startup.")
        w.raw("INFO:     Application startup complete.")
        if fw.name == "sglang":
            w.raw("INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)")
        if fw.name != "vllm":
            w.raw(fw.ready_line)
        self.clock += (w.t - self.clock) + 10.0
