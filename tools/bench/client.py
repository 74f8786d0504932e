"""Async streaming OpenAI-compatible client: the load generator over HTTP (`tools.protocols.Client`).

Each request is `POST /v1/completions` with `stream: true`, `ignore_eos: true` and `max_tokens`
= the spec's output length, so every request generates exactly what the workload asked for.
Times are taken with perf_counter at send, at each streamed chunk and at the end, relative to
the start of the run. Errors are recorded in the request's record, never raised: a server that
dies mid-run yields failed records, not an exception.
"""
from __future__ import annotations

import asyncio
import json
import time
from contextlib import aclosing

import httpx

from tools.errors import BadInput
from tools.bench.records import RequestRecord, RequestSpec
from tools.bench.refusal import NOT_SENT, TRIP_AFTER, Breaker
from tools.bench.sse import Pool


class OpenAIClient:
    def __init__(self, url: str, model: str, *, timeout_s: float = 3600.0, api_key: str | None = None,
                 progress=None, ignore_eos: bool = True, lean: bool = True, prompts=None):
        self.url = url.rstrip("/")
        self.model = model
        # vLLM/sglang take `ignore_eos`; servers that answer 422 to fields outside OpenAI's schema
        # (transformers serve) need it left out, and a model that never emits EOS instead.
        self.ignore_eos = ignore_eos
        self.lean = lean  # stream with tools/bench/sse.py on plain http (False: httpx everywhere)
        self.timeout = httpx.Timeout(timeout_s, connect=10.0)
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.progress = progress  # callable(record) after each request, e.g. a tqdm update
        # Fills specs that carry no prompt text (callers that only schedule token counts, like the
        # loop's measurement): a tools.bench.prompts.PromptMaker, exact with the served model's
        # tokenizer; without one, approximate word prompts. Never one repeated text: identical
        # prompts would hit the prefix cache and overstate throughput.
        self.prompts = prompts
        self._fills = 0

    # -- checks ----------------------------------------------------------------------------
    def check(self) -> list[str]:
        """Fail early with one clear line: the URL answers and serves this model."""
        try:
            r = httpx.get(self.url + "/v1/models", headers=self.headers, timeout=10.0)
        except httpx.HTTPError as e:
            raise BadInput(f"cannot reach {self.url}: {type(e).__name__}: {e}") from None
        if r.status_code != 200:
            raise BadInput(f"{self.url}/v1/models answered HTTP {r.status_code}; is it an OpenAI-compatible server?")
        try:
            served = [m["id"] for m in r.json()["data"]]
        except (ValueError, KeyError, TypeError):
            raise BadInput(f"{self.url}/v1/models did not return an OpenAI model list") from None
        if self.model not in served:
            raise BadInput(f"model {self.model!r} is not served by {self.url}; served: {', '.join(served)}")
        return served

    # -- load ------------------------------------------------------------------------------
    def _http(self, n: int) -> httpx.AsyncClient:
        limits = httpx.Limits(max_connections=max(n, 1), max_keepalive_connections=max(n, 1))
        return httpx.AsyncClient(timeout=self.timeout, limits=limits, headers=self.headers)

    async def run(self, specs: list[RequestSpec], *, concurrency: int | None = None) -> list[RequestRecord]:
        """Send each spec at its arrival_s (or keep `concurrency` in flight); one record each."""
        if concurrency is not None and concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        specs = self.fill(specs)
        n_conn = concurrency or len(specs)
        async with self._http(n_conn) as http:
            # Plain http: the lean SSE reader (tools/bench/sse.py) keeps the generator off the
            # critical path; https goes through httpx.
            transport = Pool(self.url, self.headers) if self.lean and self.url.startswith("http://") else http
            t0 = time.perf_counter()
            breaker = Breaker()  # tools/bench/refusal.py: identical failures end the level early
            if concurrency:
                sem = asyncio.Semaphore(concurrency)

                async def send(s: RequestSpec) -> RequestRecord:
                    async with sem:
                        return await self._one(transport, s, t0)
            else:
                async def send(s: RequestSpec) -> RequestRecord:
                    delay = t0 + s.arrival_s - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)  # the schedule's arrival time, not a race workaround
                    return await self._one(transport, s, t0)

            tasks = [asyncio.create_task(send(s)) for s in specs]

            def watch(task: asyncio.Task) -> None:
                if not task.cancelled() and task.exception() is None and \
                        breaker.add(task.result().ok, task.result().error):
                    for other in tasks:
                        other.cancel()
            for task in tasks:
                task.add_done_callback(watch)
            try:
                await asyncio.gather(*tasks, return_exceptions=True)
            finally:
                for task in tasks:  # Ctrl-C or an error: nothing left in flight
                    task.cancel()
                if isinstance(transport, Pool):
                    transport.close()
            return [t.result() if not t.cancelled() else self._not_sent(s, t0, breaker.tripped)
                    for t, s in zip(tasks, specs)]

    @staticmethod
    def _not_sent(s: RequestSpec, t0: float, why: str | None) -> RequestRecord:
        now = time.perf_counter() - t0
        return RequestRecord(id=s.id, send_s=now, first_token_s=None, end_s=now, input_tokens=s.input_tokens,
                             output_tokens=0, ok=False, error=f"{NOT_SENT}{TRIP_AFTER} requests failed alike: {why}")

    def fill(self, specs: list[RequestSpec]) -> list[RequestSpec]:
        """Specs with prompt texts; fresh unique parts per call, shared prefixes per group."""
        if all(s.prompt is not None for s in specs):
            return specs
        if self.prompts is None:
            from tools.bench.prompts import PromptMaker
            self.prompts = PromptMaker(None)
        self._fills += 1
        filled = self.prompts.prompts(specs, seed=7919 * self._fills)
        return [s if s.prompt is not None else f for s, f in zip(specs, filled)]

    async def _events_httpx(self, http: httpx.AsyncClient, body: dict):
        async with http.stream("POST", self.url + "/v1/completions", json=body) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")
                raise RuntimeError(f"HTTP {r.status_code}: {text[:200]}")
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    yield line[5:].strip().encode()

    async def _one(self, transport, s: RequestSpec, t0: float) -> RequestRecord:
        body = {"model": self.model, "prompt": s.prompt,
                "max_tokens": s.output_tokens, "stream": True, "temperature": 0.0,
                "stream_options": {"include_usage": True}}
        if self.ignore_eos:
            body["ignore_eos"] = True
        times: list[float] = []
        usage_tokens = None
        send = time.perf_counter() - t0
        error = None
        try:
            events = (transport.post_events("/v1/completions", body) if isinstance(transport, Pool)
                      else self._events_httpx(transport, body))
            async with aclosing(events) as stream:
                async for data in stream:
                    if data == b"[DONE]":
                        continue  # read on to the end of the response so the connection is reused
                    ev = json.loads(data)
                    if ev.get("error"):
                        raise RuntimeError(f"server error: {str(ev['error'])[:200]}")
                    choices = ev.get("choices")
                    if choices and any(c.get("text") for c in choices):
                        times.append(time.perf_counter() - t0)
                    if ev.get("usage"):
                        usage_tokens = ev["usage"].get("completion_tokens")
        except Exception as e:  # recorded, never raised: a dead server gives failed records
            error = f"{type(e).__name__}: {e}"[:300]
        end = time.perf_counter() - t0
        out_tokens = usage_tokens if usage_tokens is not None else len(times)
        ok = error is None and out_tokens >= s.output_tokens
        if error is None and not ok:
            error = f"short output: {out_tokens} of {s.output_tokens} tokens"
        rec = RequestRecord(id=s.id, send_s=send, first_token_s=times[0] if times else None, end_s=end,
                            input_tokens=s.input_tokens, output_tokens=out_tokens, ok=ok, error=error,
                            token_times_s=times)
        if self.progress:
            self.progress(rec)
        return rec

    # -- evals -----------------------------------------------------------------------------
    async def complete(self, prompts: list[str], *, max_tokens: int = 256, temperature: float = 0.0,
                       seed: int = 0, concurrency: int = 8, stop: list[str] | None = None) -> list[str]:
        """Completion texts in prompt order. A request that fails yields '' and is kept in
        `self.errors` (index -> message), so one bad item cannot sink an eval."""
        self.errors: dict[int, str] = {}
        sem = asyncio.Semaphore(concurrency)
        async with self._http(concurrency) as http:
            async def one(i: int, p: str) -> str:
                body = {"model": self.model, "prompt": p, "max_tokens": max_tokens,
                        "temperature": temperature, "seed": seed}
                if stop:
                    body["stop"] = stop
                async with sem:
                    try:
                        r = await http.post(self.url + "/v1/completions", json=body)
                        if r.status_code != 200:
                            raise RuntimeError(f"HTTP {r.status_code}: {r.text[:200]}")
                        return r.json()["choices"][0]["text"]
                    except Exception as e:
                        self.errors[i] = f"{type(e).__name__}: {e}"[:300]
                        return ""
            return list(await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts))))
