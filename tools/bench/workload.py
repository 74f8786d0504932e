"""Workload shapes and the pure schedule of a run: who is sent when, with how many tokens.

Arrivals are generated here, not in the clients, so that the simulator and the HTTP client
replay exactly the same schedule for the same seed.
"""
from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tools.bench.records import RequestSpec


class Workload(BaseModel):
    # Unknown keys, NaN/inf and absurd sizes are refused here, once, for every caller.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    input_len: int = Field(20000, ge=1, le=10_000_000)  # the story's throughput workload: 20k in / 1k out
    output_len: int = Field(1000, ge=1, le=1_000_000)
    prefix_hit: float = Field(0.6, ge=0.0, le=1.0)  # fraction of input tokens shared (cacheable)
    prefix_groups: int = Field(1, ge=1, le=100_000)  # distinct shared prefixes (e.g. system prompts / docs)
    # Benchmark clients' --random-range-ratio: each request's input and output lengths are drawn
    # uniformly in [ratio x len, len] (1.0: every request exactly len, as the story's workload).
    range_ratio: float = Field(1.0, gt=0.0, le=1.0)
    # Prompts of random token ids (vLLM/ATOM benchmark_serving `--dataset-name random`) rather than
    # text: a draft model guesses the continuation of noise far worse than of real text.
    random_tokens: bool = False


def schedule(w: Workload, *, n: int, rate: float | None, seed: int = 0) -> list[RequestSpec]:
    """n requests with Poisson arrivals at `rate` per second (all at t=0 when rate is None,
    i.e. fixed-concurrency mode where the client paces them)."""
    rng = np.random.default_rng(seed)
    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    gaps = rng.exponential(1.0 / rate, size=n) if rate else np.zeros(n)
    arrivals = np.cumsum(gaps) - (gaps[0] if n else 0.0)  # first request at t=0
    prefix = int(round(w.input_len * w.prefix_hit))
    ins, outs = [w.input_len] * n, [w.output_len] * n
    if w.range_ratio < 1.0:
        # A second stream, so a spread does not change the arrivals of the same seed.
        lr = np.random.default_rng([seed, 1])
        ins = [int(x) for x in lr.integers(max(int(w.input_len * w.range_ratio), 1), w.input_len + 1, size=n)]
        outs = [int(x) for x in lr.integers(max(int(w.output_len * w.range_ratio), 1), w.output_len + 1, size=n)]
    return [RequestSpec(id=i, input_tokens=ins[i], output_tokens=outs[i],
                        arrival_s=float(arrivals[i]), prefix_tokens=min(prefix, ins[i]),
                        prefix_group=int(i % w.prefix_groups), random_tokens=w.random_tokens)
            for i in range(n)]


# The flags by which a framework caps the context below the model's own window.
CONTEXT_FLAGS = ("--max-model-len", "--context-length", "--max_model_len", "--context_length")


def window(card, flags: dict, where: str = "base_flags") -> tuple[int | None, str]:
    """The context the server will allow given these launch flags, and where that number comes
    from (`where`: what the flags are called to the user)."""
    w, src = int(getattr(card, "max_position_embeddings", 0) or 0) or None, "the model's max_position_embeddings"
    for flag in CONTEXT_FLAGS:
        v = flags.get(flag)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0 and (w is None or v < w):
            w, src = v, f"{where} {flag} {v}"
    return w, src
