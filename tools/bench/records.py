"""What a load generator sends and what comes back, per request.

Both grounds produce the same records: the HTTP client from wall-clock timestamps, the
simulator from simulated ones. Everything downstream (metrics, knee, reports) reads only these.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(slots=True)
class RequestSpec:
    id: int
    input_tokens: int
    output_tokens: int  # requested max_tokens (generation is forced to this length: ignore_eos)
    arrival_s: float = 0.0  # offset from the start of the run; ignored in fixed-concurrency mode
    prefix_tokens: int = 0  # leading tokens shared with the other requests of the same group
    prefix_group: int = 0
    prompt: str | None = None  # text for real servers; the simulator needs only the counts
    random_tokens: bool = False  # prompt of random token ids (benchmark clients' `random` dataset)


@dataclass(slots=True)
class RequestRecord:
    id: int
    send_s: float  # seconds since the start of the run
    first_token_s: float | None  # None when no token came back
    end_s: float
    input_tokens: int
    output_tokens: int  # tokens actually received
    ok: bool
    error: str | None = None
    token_times_s: list[float] = field(default_factory=list)  # arrival time of each output chunk

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.send_s

    @property
    def latency_s(self) -> float:
        return self.end_s - self.send_s

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "RequestRecord":
        return cls(**d)
