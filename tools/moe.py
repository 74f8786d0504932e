"""MoE kernel tuning, end to end: shapes from the model card, the tuner run through the sandbox,
the configs installed into the candidate, and the check that the server's log now names them.

A tuned config that the server does not pick up is worth nothing, so `engagement` is decided from
the log (the framework's own "using config from ..." line), never assumed.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from tools.candidate import Candidate


def shard_shape(card, c: Candidate):
    """The expert GEMM shape one GPU runs: EP splits experts across the tp group, TP splits N."""
    ep = c.parallel.tp if c.parallel.ep else 1
    return card.moe_shapes(tp=c.parallel.tp, ep=ep)


def tune(sandbox, c: Candidate, run_dir: Path, name: str) -> list[Path]:
    """Run the framework's tuner through the sandbox; keep the configs under run_dir/moe_configs/name."""
    written = [Path(p) for p in sandbox.tune_moe(c, run_dir)]
    if not written:
        raise RuntimeError("the MoE tuner wrote no config")
    dest = Path(run_dir) / "moe_configs" / name
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for p in written:
        q = dest / p.name
        if p.resolve() != q.resolve():
            shutil.copy2(p, q)
        out.append(q)
    return out


# aiter's tuned fused-MoE table (aiter/jit/core.py reads it at import): the one a framework running
# aiter's MoE reads (ATOM; sglang on ROCm, SGLANG_USE_AITER=1; vLLM with VLLM_ROCM_USE_AITER=1),
# whatever its own variable for Triton configs is
AITER_ENV = "AITER_CONFIG_FMOE"


def config_env(framework, configs) -> str:
    """The env variable the server reads these configs through: aiter's for its CSV table (a file),
    else the framework's own folder of Triton JSON configs (sglang's SGLANG_MOE_CONFIG_DIR names a
    folder of configs/triton_*/E=...json, which aiter never reads)."""
    return AITER_ENV if any(Path(p).suffix == ".csv" for p in configs) else framework.moe_config_env


def env_vars(framework) -> set[str]:
    """Every env variable `install` may set for this framework."""
    return {v for v in (framework.moe_config_env, AITER_ENV) if v}


def install(c: Candidate, configs: list[Path], framework) -> Candidate:
    """The candidate with the tuned configs and the env variable that points the server at them:
    the file itself for aiter's CSV table, a directory for Triton-style JSON configs."""
    env = dict(c.env)
    var = config_env(framework, configs)
    if var:
        csv = [p for p in configs if p.suffix == ".csv"]
        env[var] = str(csv[0].resolve()) if csv else str(configs[0].resolve().parent)
    return c.model_copy(update={"moe_configs": [str(p.resolve()) for p in configs], "env": env})


def on_layout(c: Candidate, parallel, framework) -> Candidate:
    """The candidate on another layout, without its tuned configs: they fit the shard shape they
    were tuned for, and the new layout tunes its own."""
    env = {k: v for k, v in c.env.items() if k not in env_vars(framework)}
    return c.model_copy(update={"parallel": parallel, "moe_configs": [], "env": env})


def engagement(diagnoses: list[dict], configs: list[str]) -> tuple[bool, str]:
    """Did the server use a tuned config we installed? (engaged, the evidence line or why not)."""
    names = {Path(p).name for p in configs}
    tuned = [d for d in diagnoses if d["kind"] == "moe_tuned_config"]
    default = [d for d in diagnoses if d["kind"] == "moe_default_config"]
    for d in tuned:
        path = (d.get("details") or {}).get("path") or ""
        if Path(path).name in names or (d.get("details") or {}).get("backend") == "aiter":
            if not default:
                return True, (d.get("evidence") or [d["message"]])[0]
    if default:
        return False, "the log still shows the default-config fallback: " + (default[0].get("evidence") or [""])[0]
    return False, "the log never names a tuned MoE config"
