"""The simulator run on each calibration case: a public point (its benchmark client's fixed
concurrency, length spread and prompt kind, replayed through the discrete-event engine), or one of
the story's six figures (the same knee search and single stream `agent estimate` runs).

Also a closed-form steady state of the same step-time physics (`surrogate`), cheap enough for
the least-squares fit to call thousands of times; the fit corrects it by its ratio to the engine
on each case, so what is fitted and reported is the engine's prediction.
"""
from __future__ import annotations

import asyncio
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sandboxes.sim.engine import Engine
from sandboxes.sim.perf import Efficiency, SimConfig, acceptance_length, efficiency, kv_capacity_tokens, step_time
from sandboxes.sim.points import Case, sim_config
from tools import frameworks, moe
from tools.bench.metrics import summarize
from tools.bench.workload import Workload, schedule
from tools.hardware import get_hardware
from tools.models import get_model

SPEC = ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "5", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "6"]
FINAL = ["--tp-size", "4", "--dp-size", "2", "--kv-cache-dtype", "fp8_e4m3", "--enable-aiter-allreduce-fusion"] + SPEC
STORY_SOURCE = "story (DESIGN.md)"
MAX_PROMPTS_PER_SLOT = 5  # requests per concurrency slot replayed: past the first wave, steady state


@dataclass(frozen=True)
class StoryFigure:
    id: str
    what: str
    tail: tuple[str, ...]
    weights: str
    hw: str
    moe_tuned: bool
    metric: str  # knee_tok_s | single_stream_tok_s
    value: float
    rates: tuple[float, ...] = ()
    knee_rps: float | None = None  # the achieved request rate at the knee, where the story states one


# The story's six figures (DESIGN.md), each with its workload: 20k in / 1k out at 60% prefix hit,
# the knee under a 5 s TTFT p95 SLO; single stream 10k in / 1.5k out.
# A knee rate is an achieved rate: output tok/s / 1000 with every request successful. The story's
# sweep column is the rate its client offered (1.5 -> 1913 tok/s, 2.4 -> 2626: more tokens than
# that many requests can carry), so S1's "2.4 RPS" is not the knee's achieved rate; its measured
# 2626 tok/s says that rate was 2.626 req/s. S2 (2.0 / 1944) and S6 (3.0 / 3192) agree with their
# tok/s within the 10% a rate is held to and keep their stated rates.
STORY_KNEE_RPS_S1 = 2626 / 1000
STORY = (
    StoryFigure("S1", "TP4xDP2 MTP 5/1/6, MoE tuned: knee", tuple(FINAL), "mxfp4", "mi355x", True, "knee_tok_s", 2626,
                knee_rps=STORY_KNEE_RPS_S1),
    StoryFigure("S2", "TP4xDP2 MTP 5/1/6, MoE fallback: knee", tuple(FINAL), "mxfp4", "mi355x", False, "knee_tok_s", 1944,
                knee_rps=2.0),
    StoryFigure("S3", "TP8 MTP 5/1/6 (decode-tuned), MoE fallback: knee",
                ("--tp-size", "8", "--kv-cache-dtype", "fp8_e4m3", "--enable-aiter-allreduce-fusion", *SPEC),
                "mxfp4", "mi355x", False, "knee_tok_s", 1461),
    StoryFigure("S4", "TP4xDP2 MTP 5/1/6: single stream", tuple(FINAL), "mxfp4", "mi355x", True,
                "single_stream_tok_s", 213),
    StoryFigure("S5", "TP4xDP2 without MTP: single stream (a third of S4)", tuple(FINAL[:7]), "mxfp4", "mi355x",
                True, "single_stream_tok_s", 213 / 3, rates=(0.5,)),
    StoryFigure("S6", "B200 FP8 TP8 MTP 5/1/6: knee", ("--tp-size", "8", "--kv-cache-dtype", "fp8_e4m3", *SPEC),
                "fp8", "b200", True, "knee_tok_s", 3192, knee_rps=3.0),
)


def run_case(case: Case, *, seed: int = 0) -> dict:
    """Engine prediction for a public point: output tok/s per server, TTFT and TPOT medians."""
    m, hw = get_model(case.model), get_hardware(case.hw)
    cfg = sim_config(case)
    eff = efficiency(cfg.framework, hw.vendor, cfg.version)
    if kv_capacity_tokens(m, hw, cfg) <= case.isl + case.osl:
        return {"refused": "out of memory: the KV pool cannot hold one request"}
    w = Workload(input_len=case.isl, output_len=case.osl, prefix_hit=0.0, range_ratio=case.range_ratio,
                 random_tokens=case.random_tokens)
    n = min(case.num_prompts, MAX_PROMPTS_PER_SLOT * case.concurrency)
    specs = schedule(w, n=max(n, case.concurrency), rate=None, seed=seed)
    eng = Engine(m, hw, cfg, eff, rng=np.random.default_rng(seed), noise=0.0, context_len=case.isl + case.osl + 64)
    p = summarize(eng.run(specs, concurrency=case.concurrency), fixed_concurrency=case.concurrency)
    return {"output_tok_s": p.tok_s, "ttft_s": p.ttft_p50_s, "tpot_s": p.tpot_p50_s}


def run_story(f: StoryFigure, *, seed: int = 0) -> dict:
    from sandboxes.sim import SimSandbox
    from sandboxes.sim.estimate import estimate
    cand = _candidate(f)
    with tempfile.TemporaryDirectory(prefix="inferloop-calibrate-") as d:
        sim = SimSandbox("glm-5.2", f.hw, seed=seed, check_source=False)
        if f.moe_tuned:
            cand = moe.install(cand, sim.tune_moe(cand, Path(d)), frameworks.get(cand.framework))
        server = sim.launch(cand, Path(d))
        w = Workload(input_len=20000, output_len=1000, prefix_hit=0.6)
        res = asyncio.run(estimate(server.client, w, ttft_slo_s=5.0, rates=list(f.rates) or None, seed=seed,
                                   single_stream=f.metric == "single_stream_tok_s"))
    if f.metric == "knee_tok_s":
        return {"knee_tok_s": res.knee.tok_s if res.knee else None, "knee_rps": res.knee.rps if res.knee else None}
    return {f.metric: res.single_stream_tok_s}


def _candidate(f: StoryFigure):
    """The figure's sglang command line as a Candidate (parallelism lifted out, as `agent
    estimate` does; kept here so the sim does not import the agent's CLI layer)."""
    from tools import frameworks
    from tools.candidate import Candidate, Parallel
    flags = frameworks.get("sglang").parse_flags(list(f.tail))
    par = Parallel(tp=int(flags.pop("--tp-size", 1)), dp=int(flags.pop("--dp-size", 1)))
    return Candidate(framework="sglang", weights=f.weights, parallel=par, flags=flags)


# ---- the closed-form steady state the fit iterates on -------------------------------------
@dataclass
class Ctx:
    """What the surrogate needs of a case, resolved once (cards, config)."""
    m: object
    hw: object
    cfg: SimConfig
    isl: float
    osl: float
    conc: float  # requests in flight per replica
    waves: bool  # all requests the same length: they start and finish together
    random_tokens: bool
    prefix: float = 0.0  # cached prompt tokens (story)


def ctx_for_case(case: Case) -> Ctx:
    cfg = sim_config(case)
    r = case.range_ratio
    return Ctx(get_model(case.model), get_hardware(case.hw), cfg, case.isl * (1 + r) / 2, case.osl * (1 + r) / 2,
               # equal lengths run in waves, unless speculative acceptance spreads their finishing steps
               min(case.concurrency / cfg.dp, cfg.max_running), r >= 1.0 and case.concurrency > 1 and not cfg.spec,
               case.random_tokens)


def ctx_for_story(f: StoryFigure) -> Ctx:
    from sandboxes.sim import frameworks as simfw
    from tools import frameworks
    m, hw = get_model("glm-5.2"), get_hardware(f.hw)
    cand = _candidate(f)
    fw = frameworks.get("sglang")
    flags = fw.parse_flags(fw.argv(cand, model="m", port=1)[3:])
    cfg = simfw.to_config("sglang", flags, cand, m, hw).cfg
    cfg.moe_tuned = f.moe_tuned
    if f.metric == "single_stream_tok_s":
        return Ctx(m, hw, cfg, 10000, 1500, 1, False, False)
    return Ctx(m, hw, cfg, 8000, 1000, cfg.max_running * 0.75, False, False, prefix=12000)


def surrogate(c: Ctx, eff: Efficiency) -> dict:
    """Steady state at c.conc in flight: every request's prefill interrupts (sglang) or rides
    along (mixed batches) the decode steps of the others."""
    cfg, m, hw = c.cfg, c.m, c.hw
    a = acceptance_length(cfg, random_tokens=c.random_tokens)
    n = max(c.conc, 1.0)
    t_d = step_time(m, hw, cfg, eff, n_decode=int(round(n)), decode_ctx=c.prefix + c.isl + c.osl / 2).seconds
    chunks = max(1, math.ceil(c.isl / cfg.chunk))
    per = min(c.isl, cfg.chunk)
    if eff.mixed_prefill and n > 1:
        t_mix = step_time(m, hw, cfg, eff, n_decode=int(round(n)), decode_ctx=c.prefix + c.isl + c.osl / 2,
                          prefill_tokens=int(per), prefill_ctx=c.prefix + c.isl / 2, n_prefill_seqs=1).seconds
        t_p, extra = chunks * t_mix, chunks * max(t_mix - t_d, 0.0)
    else:
        t_p = chunks * step_time(m, hw, cfg, eff, n_decode=0, decode_ctx=0, prefill_tokens=int(per),
                                 prefill_ctx=c.prefix + c.isl / 2, n_prefill_seqs=1).seconds
        extra = t_p
    cycle = c.osl / a * t_d + n * extra
    wait = (n - 1) / 2 * extra if c.waves else t_d / 2
    return {"output_tok_s": cfg.dp * n * c.osl / cycle, "ttft_s": eff.req_ms * 1e-3 + t_p + wait,
            "tpot_s": cycle / c.osl, "knee_tok_s": cfg.dp * n * c.osl / cycle, "knee_rps": cfg.dp * n / cycle,
            "single_stream_tok_s": c.osl / (c.osl / a * t_d + t_p)}
