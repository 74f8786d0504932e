"""Fake Clients shared by tests of code that runs over any Client (sweeps, estimates)."""
from tools.bench.records import RequestRecord


class CapacityClient:
    """One server that serves `cap` requests/s: below that rate TTFT is `ttft_s`; above it the
    queue grows and TTFT with it. Records (number of specs, concurrency) of every run."""

    def __init__(self, cap: float, *, ttft_s: float = 0.1, decode_s: float = 0.5):
        self.cap, self.ttft_s, self.decode_s, self.calls = cap, ttft_s, decode_s, []

    async def run(self, specs, *, concurrency=None):
        self.calls.append((len(specs), concurrency))
        out, free_at = [], 0.0
        for s in specs:
            start = max(s.arrival_s, free_at)
            free_at = start + 1.0 / self.cap
            first = start + self.ttft_s
            out.append(RequestRecord(id=s.id, send_s=s.arrival_s, first_token_s=first, end_s=first + self.decode_s,
                                     input_tokens=s.input_tokens, output_tokens=s.output_tokens, ok=True))
        return out

    async def complete(self, prompts, *, max_tokens=256, temperature=0.0, seed=0):
        return [""] * len(prompts)
