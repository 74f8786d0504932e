"""Discrete-event model of one serving node: a serial front end (tokenizer), then `dp` replicas,
each a continuous-batching engine with chunked prefill, a prefix cache, a KV pool with
admission control and preemption, and speculative decoding.

Steps are simulated in segments: while a replica's batch does not change (no arrival, no
completion) its decode steps cost the same, so a run of them is advanced at once. Cost is
therefore linear in requests, not in tokens.
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from sandboxes.sim.perf import (Efficiency, SimConfig, acceptance_length, acceptance_spread, frontend_s,
                                kv_capacity_tokens, step_time)
from tools.bench.records import RequestRecord, RequestSpec
from tools.hardware import HardwareProfile
from tools.models import ModelCard

MAX_SEGMENT = 48  # decode steps advanced at once at most (context growth changes step cost)

# KV admission, as the real schedulers do it (read in their sources, 2026-12-04). sglang
# (schedule_policy.py PrefillAdder, 0.5.8 and 0.5.23) admits a request only if its prompt and its
# whole output (clipped at 4096 tokens) fit beside what the running requests may still write,
# counted at a "new-token ratio" of their remaining outputs: 0.7 x --schedule-conservativeness at
# start and whenever the scheduler goes idle, decaying linearly to 0.14 of that over 600 decode
# steps, and raised after a retraction to what the survivors have actually written of their
# budgets; it retracts the requests with the fewest output tokens first (then the longest prompt).
# vLLM V1 (v1/core/sched/scheduler.py) and ATOM (model_engine/scheduler.py) allocate blocks for
# the prompt only and, when decode runs out, preempt the newest running request (recompute).
RESERVES_OUTPUT = ("sglang",)
RATIO_INIT, RATIO_MIN_FACTOR, RATIO_DECAY_STEPS = 0.7, 0.14, 600
CLIP_NEW_TOKENS = 4096
RETRACT_STEPS = 20


@dataclass
class _Req:
    spec: RequestSpec
    send_s: float
    ready_s: float  # when the scheduler sees it (after the front end)
    todo: int = 0  # prompt tokens still to prefill
    ctx: float = 0.0  # tokens in its KV (prefix included)
    own_kv: float = 0.0  # KV tokens it holds alone (shared prefix excluded)
    generated: float = 0.0
    first_token_s: float | None = None
    admitted: bool = False
    end_s: float | None = None
    error: str | None = None


@dataclass
class _Replica:
    idx: int
    capacity: float
    clock: float = 0.0
    pending: list = field(default_factory=list)  # heap of (ready_s, seq, _Req)
    waiting: list = field(default_factory=list)
    prefilling: list = field(default_factory=list)
    running: list = field(default_factory=list)
    cached: dict = field(default_factory=dict)  # prefix group -> cached prefix tokens
    used: float = 0.0  # KV tokens held (own tokens of admitted requests)
    preemptions: int = 0
    ratio: float = 0.0  # sglang's new-token ratio (RESERVES_OUTPUT): the share of running outputs reserved

    def busy(self) -> bool:
        return bool(self.waiting or self.prefilling or self.running)

    def next_time(self) -> float:
        if self.busy():
            return self.clock
        return max(self.clock, self.pending[0][0]) if self.pending else math.inf


class Engine:
    def __init__(self, model: ModelCard, hw: HardwareProfile, cfg: SimConfig, eff: Efficiency, *,
                 rng: np.random.Generator, noise: float = 0.02, context_len: int | None = None):
        self.m, self.hw, self.cfg, self.eff, self.rng = model, hw, cfg, eff, rng
        self.accept = acceptance_length(cfg)
        self.accept_sd, self.accept_max = 0.0, 1
        self.capacity = kv_capacity_tokens(model, hw, cfg)
        self.context_len = context_len or model.max_position_embeddings
        # One draw per run: the run-to-run spread a real node shows (clocks, placement, thermals).
        self.run_factor = float(math.exp(rng.normal(0.0, noise)))
        self.noise = noise
        self.stats = {"steps": 0, "segments": 0, "preemptions": 0}

    # ---- public --------------------------------------------------------------------------
    def run(self, specs: list[RequestSpec], concurrency: int | None = None) -> list[RequestRecord]:
        reps = [_Replica(i, self.capacity) for i in range(self.cfg.replicas)]
        records: dict[int, RequestRecord] = {}
        # Drafts accept less on random-token prompts than on text (benchmark clients' random dataset).
        rnd = sum(s.random_tokens for s in specs) * 2 > len(specs)
        self.accept = acceptance_length(self.cfg, random_tokens=rnd)
        self.accept_sd, self.accept_max = acceptance_spread(self.cfg, random_tokens=rnd)
        self._fe_free = 0.0
        self._seq = 0
        self._rr = 0
        queue = list(specs)
        if concurrency:
            for s in queue[:concurrency]:
                self._send(reps, s, 0.0, records)
            queue = queue[concurrency:]
        else:
            for s in queue:
                self._send(reps, s, s.arrival_s, records)
            queue = []
        while True:
            r = min(reps, key=_Replica.next_time)
            t = r.next_time()
            if t == math.inf:
                break
            r.clock = t
            while r.pending and r.pending[0][0] <= r.clock:
                r.waiting.append(heapq.heappop(r.pending)[2])
            done = self._act(r)
            for q in sorted(done, key=lambda q: q.end_s):
                records[q.spec.id] = RequestRecord(
                    id=q.spec.id, send_s=q.send_s, first_token_s=q.first_token_s, end_s=q.end_s,
                    input_tokens=q.spec.input_tokens,
                    output_tokens=int(q.generated) if q.error else q.spec.output_tokens,
                    ok=q.error is None, error=q.error)
                if queue:
                    self._send(reps, queue.pop(0), q.end_s, records)
        return [records[s.id] for s in specs if s.id in records]

    # ---- arrivals ------------------------------------------------------------------------
    def _send(self, reps: list[_Replica], s: RequestSpec, t: float, records: dict) -> None:
        if s.input_tokens + s.output_tokens > self.context_len:
            records[s.id] = RequestRecord(
                id=s.id, send_s=t, first_token_s=None, end_s=t + 0.005, input_tokens=s.input_tokens,
                output_tokens=0, ok=False,
                error=f"400: This model's maximum context length is {self.context_len} tokens")
            return
        # The front end tokenizes requests one at a time, then dispatches round-robin.
        start = max(t, self._fe_free)
        self._fe_free = start + frontend_s(s.input_tokens, self.eff)
        # The per-request latency (HTTP, tokenizer IPC) delays this request only, not the queue.
        ready = self._fe_free + self.eff.req_ms * 1e-3
        r = reps[self._rr % len(reps)]
        self._rr += 1
        self._seq += 1
        heapq.heappush(r.pending, (ready, self._seq, _Req(spec=s, send_s=t, ready_s=ready)))

    # ---- one scheduler action of one replica -------------------------------------------
    @property
    def _ratio_init(self) -> float:
        return min(RATIO_INIT * self.cfg.conservativeness, 1.0)

    def _admit(self, r: _Replica) -> None:
        cfg = self.cfg
        sglang = cfg.framework in RESERVES_OUTPUT
        if not (r.running or r.prefilling):
            r.ratio = self._ratio_init  # an idle scheduler starts its guess afresh
        # What admitted requests may still take: the prompt tokens not yet prefilled, and (sglang)
        # their future outputs, at the ratio for running requests, whole for the ones still prefilling.
        reserve = sum(q.todo for q in r.prefilling)
        if sglang:
            reserve += r.ratio * sum(_left(q) for q in r.running) + sum(_left(q) for q in r.prefilling)
        while r.waiting and len(r.running) + len(r.prefilling) < cfg.max_running:
            q = r.waiting[0]
            hit = 0
            if cfg.prefix_cache and q.spec.prefix_tokens:
                hit = min(q.spec.prefix_tokens, r.cached.get(q.spec.prefix_group, 0))
            need = q.spec.input_tokens - hit + q.generated
            out = _left(q) if sglang else 0.0
            if r.used + reserve + need + out > r.capacity - self._prefix_kv(r):
                if not (r.running or r.prefilling) and need + q.spec.output_tokens <= r.capacity:
                    pass  # an idle engine always takes one request that fits
                else:
                    break
            r.waiting.pop(0)
            q.todo, q.ctx, q.own_kv, q.admitted = int(need), float(hit), 0.0, True
            r.prefilling.append(q)
            reserve += need + out

    def _prefix_kv(self, r: _Replica) -> float:
        return float(sum(r.cached.values()))

    def _act(self, r: _Replica) -> list[_Req]:
        self._admit(r)
        if r.prefilling and (not self.eff.mixed_prefill or not r.running):
            return self._prefill(r, with_decode=False)
        if r.prefilling:
            return self._prefill(r, with_decode=True)
        if r.running:
            return self._decode(r)
        # Idle, yet the head of the queue cannot be admitted: it can never fit in the KV pool.
        q = r.waiting.pop(0)
        q.error, q.end_s = "the request needs more KV cache than the engine has", r.clock
        return [q]

    def _jitter(self) -> float:
        return self.run_factor * (1.0 + self.noise * 0.5 * float(self.rng.standard_normal()))

    def _prefill(self, r: _Replica, *, with_decode: bool) -> list[_Req]:
        budget = self.cfg.chunk - (len(r.running) * self.cfg.verify_tokens if with_decode else 0)
        budget = max(budget, 256)
        batch, tokens, ctx_w = [], 0, 0.0
        for q in r.prefilling:
            if tokens >= budget:
                break
            take = min(q.todo, budget - tokens)
            batch.append((q, take))
            ctx_w += take * (q.ctx + take / 2)
            tokens += take
        dec = r.running if with_decode else []
        cost = step_time(self.m, self.hw, self.cfg, self.eff, n_decode=len(dec),
                         decode_ctx=_mean_ctx(dec), prefill_tokens=tokens,
                         prefill_ctx=ctx_w / max(tokens, 1),
                         n_prefill_seqs=sum(1 for q, take in batch if take == q.todo))
        r.clock += cost.seconds * self._jitter()
        self.stats["steps"] += 1
        done = self._advance(r, dec, 1) if dec else []
        for q, take in batch:
            q.todo -= take
            q.ctx += take
            q.own_kv += take
            r.used += take
            if q.todo == 0:
                r.prefilling.remove(q)
                q.generated = max(q.generated, 1.0)
                q.first_token_s = q.first_token_s if q.first_token_s is not None else r.clock
                if q.spec.prefix_tokens and self.cfg.prefix_cache:
                    g = q.spec.prefix_group
                    if r.cached.get(g, 0) < q.spec.prefix_tokens:
                        # The shared prefix now lives in the radix tree: move it out of this request's KV.
                        share = q.spec.prefix_tokens - r.cached.get(g, 0)
                        r.cached[g] = q.spec.prefix_tokens
                        q.own_kv -= share
                        r.used -= share
                if q.generated >= q.spec.output_tokens:
                    q.end_s = r.clock
                    done.append(q)
                    r.used -= q.own_kv
                else:
                    r.running.append(q)
        return done

    def _decode(self, r: _Replica) -> list[_Req]:
        run = r.running
        a = self.accept
        remaining = min(q.spec.output_tokens - q.generated for q in run)
        n = max(1, min(MAX_SEGMENT, math.ceil(remaining / a)))
        ctx = _mean_ctx(run) + a * n / 2
        t_s = step_time(self.m, self.hw, self.cfg, self.eff, n_decode=len(run), decode_ctx=ctx).seconds
        t_s *= self._jitter()
        k = max(1, self.cfg.decode_steps)  # the scheduler looks at its queue once per round of k steps
        if r.pending:  # stop at the round where the next request reaches the scheduler
            n = max(1, min(n, k * math.ceil((r.pending[0][0] - r.clock) / (t_s * k))))
        if r.waiting and len(run) < self.cfg.max_running:
            n = min(n, k)  # a request is waiting for memory: re-check admission after every round
        start = r.clock
        r.clock += n * t_s
        self.stats["steps"] += n
        self.stats["segments"] += 1
        if self.cfg.framework in RESERVES_OUTPUT:
            lo = self._ratio_init * RATIO_MIN_FACTOR
            r.ratio = max(r.ratio - n * (self._ratio_init - lo) / RATIO_DECAY_STEPS, lo)
        done = self._advance(r, run, n, t_s=t_s, start=start)
        self._preempt(r)
        return done

    def _advance(self, r: _Replica, run: list[_Req], n: int, *, t_s: float | None = None,
                 start: float | None = None) -> list[_Req]:
        """n decode steps for `run`; completions get their exact step's end time."""
        done = []
        for q in list(run):
            left = q.spec.output_tokens - q.generated
            a = self._emitted(n) / n
            steps = math.ceil(left / a)
            if steps <= n:
                q.generated = float(q.spec.output_tokens)
                q.ctx += left
                r.used -= q.own_kv
                run.remove(q)
                q.end_s = (start + steps * t_s) if t_s is not None else r.clock
                done.append(q)
            else:
                q.generated += n * a
                q.ctx += n * a
                q.own_kv += n * a
                r.used += n * a
        return done

    def _emitted(self, n: int) -> float:
        """Tokens one request emits over n verify steps: the mean, plus the spread of a draft
        chain's acceptance (each step emits 1 .. depth+1 tokens)."""
        if self.accept_sd <= 0.0:
            return n * self.accept
        g = n * self.accept + self.accept_sd * math.sqrt(n) * float(self.rng.standard_normal())
        return min(max(g, float(n)), float(n * self.accept_max))

    def _preempt(self, r: _Replica) -> None:
        """Out of KV: retract running requests (they re-prefill later): sglang the ones with the
        fewest output tokens (then the longest prompt) and raises its ratio to what the rest have
        written of their budgets; vLLM and ATOM the newest."""
        sglang = self.cfg.framework in RESERVES_OUTPUT
        if sglang and r.used + self._prefix_kv(r) > r.capacity:
            r.running.sort(key=lambda q: (q.generated, -q.spec.input_tokens), reverse=True)
        retracted = False
        while r.used + self._prefix_kv(r) > r.capacity and len(r.running) > 1:
            q = r.running.pop()
            r.used -= q.own_kv
            q.own_kv = 0.0
            q.admitted = False
            r.waiting.insert(0, q)
            r.preemptions += 1
            self.stats["preemptions"] += 1
            retracted = True
        if sglang and retracted:
            written = sum(q.generated for q in r.running) + RETRACT_STEPS * len(r.running)
            r.ratio = min(1.0, written / (sum(min(q.spec.output_tokens, CLIP_NEW_TOKENS) for q in r.running) + 1))


def _left(q: _Req) -> float:
    """Output tokens a request may still write, as sglang's scheduler budgets them (clipped)."""
    return min(q.spec.output_tokens - q.generated, CLIP_NEW_TOKENS)


def _mean_ctx(run: list[_Req]) -> float:
    return sum(q.ctx for q in run) / len(run) if run else 0.0
