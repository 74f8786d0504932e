"""What issue 20's first real run met, on the fake ground: a workload the model cannot take is
refused before any launch; a server that refuses every request stops the run at once with its own
words; a startup-memory failure is diagnosed at its root cause and fixed by asking for less memory;
a baseline that never starts ends the run non-zero with the diagnosis, never `best: None`."""
from __future__ import annotations

import pytest
import typer

from agent.cmd_common import EXIT, emit
from agent.run import start
from agent.config import Measure, RunConfig, Target
from agent.errors import BadInput
from agent.ledger import Ledger
from tests.agent.conftest import fake_suite, small_config
from tests.agent.fakes import FakeClient, FakeSandbox, FakeServer
from tools.bench.records import RequestRecord
from tools.bench.workload import Workload
from tools.protocols import LaunchFailure

CONTEXT_400 = ('RuntimeError: HTTP 400: {"error": {"message": "This model\'s maximum context length is 4096 '
               'tokens. However, your prompt contains 5000 input tokens", "type": "BadRequestError"}}')
MEMORY_LOG = """INFO Started engine process
(EngineCore pid=7) ValueError: Available memory on node 0 (17.74/23.54 GiB) on startup is less than desired CPU memory utilization (0.92, 21.66 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved (despite its name). To resolve: decrease `--gpu-memory-utilization` (e.g. `--gpu-memory-utilization 0.5`) or reduce CPU memory used by other processes.
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"""


class RefusingClient(FakeClient):
    """A server that answers every request with the same 400, as vLLM does past its context."""

    def __init__(self):
        super().__init__(1.0, 50.0, {})
        self.sent = 0

    async def run(self, specs, *, concurrency=None):
        self.sent += len(specs)
        return [RequestRecord(id=s.id, send_s=0.0, first_token_s=None, end_s=0.01, input_tokens=s.input_tokens,
                              output_tokens=0, ok=False, error=CONTEXT_400) for s in specs]


class Ground(FakeSandbox):
    """The fake ground with two real-run behaviours switched by the candidate."""

    def __init__(self, card, hw, *, refuse=lambda c: False, free_fraction: float | None = None):
        super().__init__(card, hw)
        self.refuse, self.free_fraction, self.clients = refuse, free_fraction, []

    def launch(self, c, run_dir):
        if self.free_fraction is not None and float(c.flags.get("--gpu-memory-utilization", 0.92)) > self.free_fraction:
            self.launches.append((str(run_dir), c))
            raise LaunchFailure("server exited", excerpt=MEMORY_LOG)
        if self.refuse(c):
            self.launches.append((str(run_dir), c))
            client = RefusingClient()
            self.clients.append(client)
            return FakeServer(client, "INFO ready")
        return super().launch(c, run_dir)


def run(tmp_path, ground, **cfg):
    made = []

    def factory(cfg, card, hw):
        made.append(ground(card, hw))
        return made[-1]
    cfg.setdefault("budget", {"trials": 4})
    out = start(small_config(**cfg), tmp_path / "run", sandbox_factory=factory, suite_factory=fake_suite)
    return out, Ledger(tmp_path / "run"), made[0]


def test_a_refused_workload_stops_the_run_with_the_servers_words(tmp_path):
    out, led, ground = run(tmp_path, lambda card, hw: Ground(card, hw, refuse=lambda c: True))
    assert out["status"] == "refused" and len(ground.launches) == 1  # no other configuration was tried
    assert "maximum context length is 4096 tokens" in out["stop_reason"] and "measure.workload" in out["stop_reason"]
    (t,) = led.trials()
    assert t["verdict"] == "failed" and t["reason"].startswith("requests refused")
    assert [d["kind"] for d in t["diagnoses"]][-1] == "requests_refused"
    assert ground.clients[0].sent <= 8  # the warm-up's requests: the sweep never started
    with pytest.raises(typer.Exit) as e:
        emit(out, False)
    assert e.value.exit_code == EXIT["refused"] == 2


def test_a_candidate_refused_the_same_way_fails_alone_and_the_run_goes_on(tmp_path):
    out, led, _ = run(tmp_path, lambda card, hw: Ground(card, hw, refuse=lambda c: c.framework == "sglang"))
    assert out["status"] == "done" and out["best"]
    refused = [t for t in led.trials() if t["candidate"]["framework"] == "sglang"]
    assert refused and all(t["verdict"] == "failed" and "refused" in t["reason"] for t in refused)
    assert len(led.trials()) > 2  # the loop went on after it


def test_startup_memory_is_diagnosed_at_its_root_and_fixed(tmp_path):
    out, led, ground = run(tmp_path, lambda card, hw: Ground(card, hw, free_fraction=0.75))
    first, retry = led.trials()[:2]
    assert first["verdict"] == "failed"
    assert first["reason"].startswith("launch failed: startup_memory")  # not the engine_dead symptom below it
    assert retry["candidate"]["flags"]["--gpu-memory-utilization"] == 0.7  # 0.7536 free, less a margin, rounded
    assert retry["verdict"] == "kept" and out["status"] == "done"


def test_a_baseline_that_never_starts_fails_the_run_with_its_diagnosis(tmp_path):
    out, led, _ = run(tmp_path, lambda card, hw: Ground(card, hw, free_fraction=0.0))
    assert out["status"] == "failed" and out["best"] is None
    assert "no configuration could be measured" in out["stop_reason"]
    assert "startup_memory" in out["stop_reason"] and "To resolve: decrease" in out["stop_reason"]
    with pytest.raises(typer.Exit) as e:
        emit(out, False)
    assert e.value.exit_code == EXIT["failed"] == 1


def _cfg(hw="cpu", **measure):
    return RunConfig(target=Target(model="smollm2-135m", hw=hw), measure=Measure(**measure))


def test_a_workload_past_the_models_context_is_refused_before_launch():
    with pytest.raises(BadInput, match=r"20000 input \+ 1000 output = 21000 tokens exceeds the 8192-token context"):
        _cfg(workload=Workload(input_len=20000, output_len=1000)).check()
    cfg = RunConfig(target=Target(model="smollm2-135m", hw="cpu"), base_flags={"--max-model-len": 1024},
                    measure=Measure(workload=Workload(input_len=1000, output_len=100)))
    with pytest.raises(BadInput, match="1024-token context of smollm2-135m \\(base_flags --max-model-len 1024\\)"):
        cfg.check()


def test_the_default_workload_is_fitted_to_the_model_and_says_so():
    cfg = _cfg(hw="h200").check()
    w = cfg.measure.workload
    assert w.input_len + w.output_len <= 8192 and w.input_len == 4096
    assert any("does not fit smollm2-135m's 8192-token context" in n for n in cfg.notes)
    assert cfg.measure.single_stream.input_len + cfg.measure.single_stream.output_len <= 8192
    big = RunConfig(target=Target(model="glm-5.2", hw="mi355x")).check()
    assert big.measure.workload.input_len == 20000 and not big.notes  # the story's workload fits the story's model


def test_cli_exits_2_before_launching_a_workload_that_cannot_fit(agent, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("measure: {workload: {input_len: 20000, output_len: 1000}}\n")
    r = agent("optimize", "--model", "smollm2-135m", "--hw", "cpu", "--config", str(cfg),
              "--run-dir", str(tmp_path / "run"))
    assert r.returncode == 2 and "21000 tokens exceeds the 8192-token context" in r.stderr
    assert not (tmp_path / "run").exists()


def test_a_cpu_node_gets_measurements_it_can_finish_and_the_users_settings_win():
    cfg = _cfg().check()
    m = cfg.measure
    assert (m.workload.input_len, m.workload.output_len, m.eval_items, m.duration_s) == (512, 64, 10, 10.0)
    assert any(n.startswith("measure on a CPU node") for n in cfg.notes) and cfg.gate.noise_floor == 0.15
    assert cfg.gate.max_repeats == 2
    mine = _cfg(eval_items=50, workload=Workload(input_len=100, output_len=10)).check().measure
    assert (mine.eval_items, mine.workload.input_len, mine.duration_s) == (50, 100, 10.0)


FALLBACK = ("(Worker pid=1) WARNING 12-03 09:38:01 [utils.py:597] Failed to create oneDNN linear, fallback to torch "
            "linear. Exception: could not create a primitive descriptor for the matmul primitive.")


class SlowGemm(FakeSandbox):
    """vLLM-CPU on a CPU without bf16: it starts, warns that its GEMMs fell back, and serves so
    slowly that no load level meets the SLO, unless it runs in float32."""

    def launch(self, c, run_dir):
        srv = super().launch(c, run_dir)
        if c.framework == "vllm" and c.flags.get("--dtype") != "float32":
            srv.client.cap, srv._log = 1e-3, srv._log + "\n" + FALLBACK
        return srv


def test_a_baseline_on_the_slow_gemm_fallback_is_answered_with_float32_and_the_run_goes_on(tmp_path):
    # The driver cannot always see the node's CPU (a remote node): the server's own warning is what
    # says why its baseline met the SLO nowhere, and the catalogue answers it.
    out, led, _ = run(tmp_path, SlowGemm)
    first, retry = led.trials()[:2]
    assert first["reason_code"] == "baseline_no_slo" and "cpu_gemm_fallback" in [d["kind"] for d in first["diagnoses"]]
    assert retry["proposal"]["fixes_trial"] == first["id"] and retry["candidate"]["flags"]["--dtype"] == "float32"
    assert retry["verdict"] == "kept" and out["status"] == "done" and out["best"]
    assert len([t for t in led.trials() if t["proposal"].get("fixes_trial") == first["id"]]) == 1  # answered once


def test_a_baseline_that_started_and_measured_nothing_names_what_its_log_warned_of(tmp_path):
    # vLLM-CPU on its slow GEMM fallback starts fine, and no load level meets the SLO: the run's
    # failure says so, from the server's own warning (a non-fatal diagnosis)
    from agent.ledger import Ledger
    from agent.records import Result
    from agent.report import baseline_failure
    from tools.candidate import Candidate
    from tools.frameworks import get
    line = FALLBACK
    led = Ledger(tmp_path, create=True)
    tid = led.add_trial(phase="framework", kind="config", description="baseline",
                        candidate=Candidate(framework="vllm").model_dump(mode="json"), incumbent_id=None)
    led.update_trial(tid, outcome="launched", diagnoses=[d.model_dump() for d in get("vllm").diagnose(line)])
    led.finish_trial(tid, Result(verdict="reverted", code="baseline_no_slo", reason="baseline measured no knee"))
    text = baseline_failure(led)
    assert "diagnosis cpu_gemm_fallback" in text and "--dtype float32" in text, text
    # a line that says what works (a tuned MoE config) explains nothing: it is never the one shown
    tuned = get("vllm").diagnose("Using configuration from /cfg/E=8,N=64.json for MoE layer.")
    assert [d.kind for d in tuned] == ["moe_tuned_config"]
    led.update_trial(tid, diagnoses=[d.model_dump() for d in tuned])
    assert "diagnosis" not in baseline_failure(led)
