"""`agent estimate`: GPU-free prediction of one configuration on the simulated node.

The simulator's own command: sandboxes/sim/ground.py registers it with the ground registry and
the `agent` CLI adds every registered command, so the agent never imports the simulator.

    agent estimate --model glm-5.2 --weights mxfp4 --hw mi355x --framework sglang --moe-tuned \\
        -- --tp-size 4 --dp-size 2 --kv-cache-dtype fp8_e4m3 --speculative-algorithm NEXTN ...

Everything after `--` is the framework's own command line (checked by the framework adapter,
exactly as the real CLI would). Prints a table, or with --json the project's BenchResult schema.
"""
from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import typer

from tools import frameworks, moe
from tools.candidate import Candidate, Parallel
from tools.cli_values import positive_floats
from tools.errors import BadInput
from tools.frameworks.base import FlagError
from tools.hardware import get_hardware
from tools.models import PRECISIONS, get_model
from tools.protocols import LaunchFailure

_PARALLEL = {"--tp-size": "tp", "--tensor-parallel-size": "tp", "--dp-size": "dp",
             "--data-parallel-size": "dp", "--ep-size": "ep", "--enable-expert-parallel": "ep"}


def candidate_from_cli(framework: str, weights: str, tail: list[str], version: str | None = None) -> Candidate:
    """The framework's own flags -> a Candidate (parallelism lifted out, the rest kept verbatim
    by canonical name). Bad flags or values -> BadInput naming them and what is allowed."""
    fw = frameworks.get(framework, version)
    if weights not in PRECISIONS:
        raise BadInput(f"unknown weights {weights!r}; allowed: {', '.join(PRECISIONS)}")
    try:
        parsed = fw.parse_flags(tail)
    except FlagError as e:
        allowed = f"; allowed: {', '.join(map(str, e.allowed))}" if e.allowed else ""
        raise BadInput(f"{framework} {e}{allowed}") from None
    fw.check_values(parsed)  # nan, negative counts, fractions > 1: refused like a bad flag
    par = {"tp": 1, "dp": 1, "ep": False}
    flags: dict = {}
    for name, value in parsed.items():
        if name in _PARALLEL:
            key = _PARALLEL[name]
            par[key] = bool(value) if key == "ep" and isinstance(value, bool) else (value > 1 if key == "ep" else value)
        elif value is not False:
            flags[name] = json.dumps(value) if isinstance(value, (dict, list)) else value
    if par["tp"] < 1 or par["dp"] < 1:
        raise BadInput(f"parallel sizes must be >= 1, got tp={par['tp']} dp={par['dp']}")
    return Candidate(framework=framework, weights=weights, parallel=Parallel(**par), flags=flags)


def _oom_hint(sb, cand: Candidate, fw, prof, run_dir: Path) -> str:
    """What would start instead of a configuration whose weights do not fit, each tried on the same
    stock simulator: the node's full tensor parallelism, else the largest smaller weights that fit
    at it (the least precision given up)."""
    def failure(c: Candidate) -> str | None:  # None: it starts; else why not
        try:
            sb.launch(c, run_dir)
            return None
        except LaunchFailure as e:
            return e.diagnosis.kind if e.diagnosis else "failed"
    n = prof.gpus_per_node
    full = cand.model_copy(update={"parallel": Parallel(tp=n)})
    tp = " ".join(fw.parallel_args(full))
    why = failure(full) if full.parallel != cand.parallel else "oom"
    if why is None:
        return f" (it starts with more tensor parallelism after `--`: `-- {tp}`)"
    if why != "oom":  # full tp fails for another reason: nothing certain to suggest
        return " (more tensor parallelism after `--`, or smaller weights)"
    smaller = sorted((p for p in PRECISIONS.values() if p.bytes_per_weight < PRECISIONS[cand.weights].bytes_per_weight),
                     key=lambda p: -p.bytes_per_weight)
    fit = next((p.name for p in smaller if failure(full.model_copy(update={"weights": p.name})) is None), None)
    return (f" (its weights do not fit one {prof.name} node even at tp={n}; "
            + (f"--weights {fit} with `-- {tp}` starts)" if fit else "no smaller weights fit either)"))


def run_estimate(*, model: str, weights: str, hw: str, framework: str, moe_tuned: bool, tail: list[str],
                 input_len: int, output_len: int, prefix_hit: float, rates: list[float] | None,
                 concurrency: int | None, ttft_slo: float, seed: int = 0, duration_s: float = 120.0,
                 framework_version: str | None = None) -> dict:
    from sandboxes.sim import SimSandbox
    from sandboxes.sim.estimate import estimate
    from tools.bench.workload import Workload, window

    card, prof = get_model(model), get_hardware(hw)
    cand = candidate_from_cli(framework, weights, tail, framework_version)
    fw = frameworks.get(framework, framework_version)
    versions = {framework: fw.version}
    # with DP attention, dp splits attention inside the tp GPUs instead of adding replicas
    gpus = cand.parallel.tp if cand.flags.get("--enable-dp-attention") else cand.parallel.gpus
    if gpus > prof.gpus_per_node:
        raise BadInput(f"tp x dp = {gpus} GPUs, but a {hw} node has {prof.gpus_per_node}")
    if not (0.0 <= prefix_hit <= 1.0) or input_len < 1 or output_len < 1:
        raise BadInput("--input-len and --output-len must be >= 1 and --prefix-hit within [0, 1]")
    limit, src = window(card, cand.flags, "the flag")
    if limit is not None and input_len + output_len > limit:  # every request would be refused
        raise BadInput(f"--input-len {input_len} + --output-len {output_len} = {input_len + output_len} tokens, "
                       f"beyond {model}'s context of {limit} ({src}): every request would be refused; "
                       f"pass shorter lengths")
    notes: list[str] = [fw.version_note] if fw.version_note else []
    with tempfile.TemporaryDirectory(prefix="inferloop-estimate-") as d:
        run_dir = Path(d)
        # Stock source first: tell the user about failures a real launch would hit...
        strict = SimSandbox(card, prof, seed=seed, framework_versions=versions)
        try:
            strict.launch(cand, run_dir)
        except LaunchFailure as e:
            if e.diagnosis is None or e.diagnosis.kind not in ("shape_mismatch", "compile_error", "unsupported_quant"):
                detail = e.diagnosis.evidence[0] if e.diagnosis and e.diagnosis.evidence else ""
                hint = _oom_hint(strict, cand, fw, prof, run_dir) if e.diagnosis and e.diagnosis.kind == "oom" else ""
                # one line: the CLI prints errors on one (log text inside is shown inert)
                raise BadInput(f"this configuration does not start: {e}" + (f"; {detail}" if detail else "") + hint) from None
            notes.append(f"stock {framework} fails to start ({e.diagnosis.kind}: {e.diagnosis.message}); "
                         f"estimated as if that were fixed")
        # ...then predict performance as if the source were fixed.
        sim = SimSandbox(card, prof, seed=seed, check_source=False, framework_versions=versions)
        if moe_tuned and card.is_moe:
            cand = moe.install(cand, sim.tune_moe(cand, run_dir), frameworks.get(cand.framework))
        server = sim.launch(cand, run_dir)
        moe_line = next((ln for ln in server.log_text().splitlines() if "MoE" in ln or "fused_moe" in ln), None)
        if moe_line:
            notes.append(moe_line.split("] ", 1)[-1])
        w = Workload(input_len=input_len, output_len=output_len, prefix_hit=prefix_hit)
        res = asyncio.run(estimate(server.client, w, ttft_slo_s=ttft_slo, rates=rates, concurrency=concurrency,
                                   duration_s=duration_s, seed=seed))
    out = res.model_dump(mode="json")
    out["config"] = {"model": model, "weights": weights, "hw": hw, "framework": framework,
                     "framework_version": fw.version, "moe_tuned": moe_tuned, "flags": tail, "simulated_s": round(sim.elapsed_s(), 1)}
    out["notes"] = notes
    out["uncertainty"] = _uncertainty(framework, hw, out)
    return out


def _uncertainty(framework: str, hw: str, out: dict) -> dict:
    from sandboxes.sim.uncertainty import for_estimate
    return for_estimate(framework, hw, out)


def _table(out: dict) -> str:
    rows = ["   rps  conc   tok/s  total tok/s  TTFT p50  TTFT p95  TPOT p50  success"]
    for p in out["sweep"]:
        f = lambda v, fmt: (fmt % v) if v is not None else "-"  # noqa: E731
        rows.append(f"{p['rps']:6.2f} {p['concurrency']:5.1f} {p['tok_s']:7.0f} {p['total_tok_s']:12.0f} "
                    f"{f(p['ttft_p50_s'], '%8.2f')} {f(p['ttft_p95_s'], '%9.2f')} {f(p['tpot_p50_s'], '%9.3f')} "
                    f"{p['success'] * 100:7.0f}%")
    k = out["knee"]
    rows.append(f"knee (TTFT p95 <= {out['ttft_slo_s']} s, all ok): "
                + (f"{k['rps']:.2f} RPS, {k['tok_s']:.0f} tok/s/node" if k else "none"))
    if out.get("single_stream_tok_s") is not None:
        rows.append(f"single stream (10k in / 1.5k out): {out['single_stream_tok_s']:.0f} tok/s")
    u = out.get("uncertainty") or {}
    if u.get("message"):
        band = u.get("knee_tok_s_band")
        rows.append("uncertainty: " + u["message"] + (f"; knee {band[0]:.0f}-{band[1]:.0f} tok/s" if band else ""))
    rows += [f"note: {n}" for n in out.get("notes", [])]
    return "\n".join(rows)


def check_estimate_args(*, rates, concurrency, ttft_slo, seed, input_len, output_len, prefix_hit) -> None:
    """The estimate's numbers with the same bounds as `optimize` (tools/bounds.py, the Workload
    model): BadInput naming the value and the allowed range, never a traceback or a silent exit 0."""
    import math

    from tools.bench.workload import Workload
    from tools.bounds import SEED_MAX, TTFT_MAX_S, build
    if rates and concurrency is not None:
        raise BadInput("give --rates or --concurrency, not both (a fixed concurrency has no rate)")
    if concurrency is not None and not 1 <= concurrency <= 100_000:
        raise BadInput(f"--concurrency must be within [1, 100000], got {concurrency}")
    if not 0 <= seed <= SEED_MAX:
        raise BadInput(f"--seed must be within [0, {SEED_MAX}], got {seed}")
    if not (math.isfinite(ttft_slo) and 0 < ttft_slo <= TTFT_MAX_S):  # nan fails every comparison: test it
        raise BadInput(f"--ttft-slo must be > 0 and <= {TTFT_MAX_S:g} s, got {ttft_slo!r}")
    fields = {"input_len": input_len, "output_len": output_len, "prefix_hit": prefix_hit}
    build(Workload, "", {k: "--" + k.replace("_", "-") for k in fields}, **fields)  # named as the options are


def _rates(text: str | None) -> list[float] | None:
    return positive_floats(text, "--rates") if text else None


def register(app: typer.Typer) -> None:
    @app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def estimate(
        ctx: typer.Context,
        model: str = typer.Option("glm-5.2", help="built-in model name or a local HF checkpoint dir"),
        weights: str = typer.Option("bf16", help="checkpoint precision: bf16 | fp8 | mxfp4"),
        hw: str = typer.Option("mi355x", help="mi355x | mi300x | b200 | b300 | h200 | h100 | cpu"),
        framework: str = typer.Option("sglang", help="vllm | sglang | atom"),
        framework_version: str = typer.Option(None, help="the framework version whose CLI parses the flags "
                                              "(default: the newest with a shipped schema; see README)"),
        moe_tuned: bool = typer.Option(False, "--moe-tuned", help="run the MoE tuner for the model's shapes first"),
        input_len: int = typer.Option(20000, help="prompt tokens per request"),
        output_len: int = typer.Option(1000, help="generated tokens per request"),
        prefix_hit: float = typer.Option(0.6, help="fraction of the prompt shared between requests (cacheable)"),
        rates: str = typer.Option(None, help="comma-separated request rates (default: rise until the SLO breaks)"),
        concurrency: int = typer.Option(None, help="fixed number of requests in flight instead of rates"),
        ttft_slo: float = typer.Option(5.0, help="TTFT p95 SLO in seconds for the knee"),
        seed: int = typer.Option(0, help="seed of the simulated run-to-run noise"),
        as_json: bool = typer.Option(False, "--json", help="print the BenchResult JSON"),
    ) -> None:
        """Predict throughput (tok/s per node), TTFT, the knee and single-stream speed of one
        configuration on the simulated node, without a GPU. Framework flags go after `--`."""
        check_estimate_args(rates=rates, concurrency=concurrency, ttft_slo=ttft_slo, seed=seed,
                            input_len=input_len, output_len=output_len, prefix_hit=prefix_hit)
        out = run_estimate(model=model, weights=weights, hw=hw, framework=framework, moe_tuned=moe_tuned,
                           tail=list(ctx.args), input_len=input_len, output_len=output_len,
                           prefix_hit=prefix_hit, rates=_rates(rates), concurrency=concurrency,
                           ttft_slo=ttft_slo, seed=seed, framework_version=framework_version)
        typer.echo(json.dumps(out, indent=2) if as_json else _table(out))
