"""A Candidate is one deployment configuration: everything a sandbox needs to launch a server.

It is framework-neutral at the top (framework, weights, parallelism) and framework-specific
below (`flags` and `env` use the framework's own names, exactly as its CLI takes them), so the
same object drives the simulator and a real server.
"""
from __future__ import annotations

import hashlib
import json

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

# dict/list: JSON-typed flags (vLLM's --speculative-config), as FlagSpec type 'json' parses them.
FlagValue = str | int | float | bool | dict | list | None


class Parallel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    tp: int = Field(1, ge=1)
    dp: int = Field(1, ge=1)
    ep: bool = False  # expert parallelism across the tp x dp GPUs

    @property
    def gpus(self) -> int:
        return self.tp * self.dp

    @property
    def label(self) -> str:
        return f"TP{self.tp} x DP{self.dp}{' + EP' if self.ep else ''}"


class Candidate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    framework: str  # vllm | sglang | atom | transformers (tools.frameworks names them)
    weights: str = "bf16"  # checkpoint precision: bf16 | fp8 | mxfp4 (see tools.models.PRECISIONS)
    parallel: Parallel = Parallel()
    # The framework's own flags, by their real CLI names: {"--kv-cache-dtype": "fp8_e4m3"}.
    # True means a bare switch (`--enable-foo`); None or False means "leave it out".
    flags: dict[str, FlagValue] = {}
    env: dict[str, str] = {}
    patches: list[str] = []  # ids of approved patches (diff files under the run dir's patches/)
    moe_configs: list[str] = []  # tuned MoE config files to install (paths)

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        # launch.sh writes `export NAME=value`: a name that is not a plain identifier would be shell code.
        for k, val in v.items():
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise ValueError(f"env name {k!r} is not an environment variable name")
            if "\0" in val:
                raise ValueError(f"env {k}: value holds a NUL byte")
        return v

    def key(self) -> str:
        """A stable short id, for caching and for 'have we tried this already'."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def with_flags(self, **changes: FlagValue) -> "Candidate":
        """Copy with flags changed; keys are given without the leading dashes, `_` for `-`."""
        flags = dict(self.flags)
        for k, v in changes.items():
            flags["--" + k.replace("_", "-")] = v
        return self.model_copy(update={"flags": flags})
