"""The seams between the agent and the world. Every ground (simulator, local processes,
docker) implements these; tests use fakes that obey them, never mocks.

    Sandbox.launch(candidate) -> Server        (or raises LaunchFailure with a Diagnosis)
    Server.client.run(specs)  -> RequestRecord[]
    Server.client.complete(prompts) -> texts
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel

from tools.bench.records import RequestRecord, RequestSpec
from tools.candidate import Candidate

# What a log can tell us. Kept as plain strings so ledgers and playbooks stay plain JSON.
DIAGNOSIS_KINDS = (
    "moe_default_config",  # MoE kernel fell back to an untuned default (a warning, not fatal)
    "moe_tuned_config",  # the log names the tuned MoE config it uses
    "cpu_gemm_fallback",  # vLLM-CPU could not build a oneDNN GEMM and runs torch's slow path (a warning)
    "shape_mismatch",  # weight loading: checkpoint tensor shape != parameter shape
    "compile_error",  # a kernel / extension failed to compile
    "oom",  # out of (device) memory
    "unsupported_quant",  # quantization method not supported for this architecture / hardware
    "bad_flag",  # the CLI rejected a flag or value
    "engine_dead",  # the engine process died (any other cause)
    "not_ready",  # never became ready within the timeout
)
INFO_KINDS = ("moe_tuned_config",)  # say what works: neither a cause nor a warning


class Diagnosis(BaseModel):
    kind: str  # one of DIAGNOSIS_KINDS
    message: str  # one line, human-readable
    evidence: list[str] = []  # the log lines that support it, verbatim (data, never instructions)
    details: dict = {}  # structured facts: {"path": ..., "expected": ..., "got": ..., "file": ...}
    fatal: bool = True


class LaunchFailure(Exception):
    def __init__(self, message: str, *, excerpt: str = "", diagnosis: Diagnosis | None = None,
                 log_path: Path | None = None):
        super().__init__(message)
        self.excerpt = excerpt
        self.diagnosis = diagnosis
        self.log_path = log_path


@runtime_checkable
class Client(Protocol):
    """Talks to a running server. Times in records are seconds from the start of the run."""

    async def run(self, specs: list[RequestSpec], *, concurrency: int | None = None) -> list[RequestRecord]:
        """Send each spec at its arrival_s (or keep `concurrency` in flight); return one record each."""
        ...

    async def complete(self, prompts: list[str], *, max_tokens: int = 256,
                       temperature: float = 0.0, seed: int = 0) -> list[str]:
        """Completions for eval prompts, in order."""
        ...


@runtime_checkable
class Server(Protocol):
    client: Client
    url: str | None  # None on the simulator

    def log_text(self) -> str: ...
    def stop(self) -> None: ...
    def __enter__(self) -> "Server": ...
    def __exit__(self, *exc) -> None: ...


@runtime_checkable
class Sandbox(Protocol):
    """Where servers run for one target (model x hardware)."""

    name: str  # sim | local | docker

    def launch(self, candidate: Candidate, run_dir: Path) -> Server:
        """Start a server for the candidate and wait until ready. Raises LaunchFailure."""
        ...

    def source_tree(self, framework: str, run_dir: Path) -> Path:
        """A git work tree of the framework's source that patches apply to."""
        ...

    def tune_moe(self, candidate: Candidate, run_dir: Path) -> list[Path]:
        """Run the framework's MoE tuner for the target's shapes; return the config files written."""
        ...

    def elapsed_s(self) -> float:
        """Time spent on this ground so far (simulated seconds on the sim, wall seconds otherwise)."""
        ...
