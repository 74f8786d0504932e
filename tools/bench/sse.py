"""A lean HTTP/1.1 POST + server-sent-events reader on asyncio streams, for the load generator's
hot path.

Why not httpx here: every streamed token is one HTTP chunk, and httpx hands each one through
h11, httpcore and four iterator layers; on one core that made our load generator ~2x slower than
vLLM's aiohttp-based benchmark against a fast mock server (benchmarks/loadgen_overhead.py). This
reader does two awaits per chunk. It speaks plain http:// only (the client falls back to httpx
for https) and keeps connections alive in a small pool.
"""
from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator
from urllib.parse import urlsplit


class HTTPStatusError(RuntimeError):
    pass


class Pool:
    """Idle keep-alive connections to one host:port."""

    def __init__(self, url: str, headers: dict[str, str] | None = None):
        u = urlsplit(url)
        if u.scheme != "http":
            raise ValueError("the lean SSE reader speaks plain http only")
        self.host, self.port = u.hostname or "127.0.0.1", u.port or 80
        self.base = u.path.rstrip("/")
        self.extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []

    async def _conn(self):
        while self.idle:
            r, w = self.idle.pop()
            if not w.is_closing() and not r.at_eof():
                return r, w
            w.close()
        return await asyncio.open_connection(self.host, self.port, limit=1 << 20)

    def close(self) -> None:
        for _, w in self.idle:
            w.close()
        self.idle.clear()

    async def post_events(self, path: str, payload: dict) -> AsyncIterator[bytes]:
        """POST JSON, yield each SSE `data:` payload (bytes) as it arrives."""
        body = json.dumps(payload).encode()
        head = (f"POST {self.base}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                f"Content-Length: {len(body)}\r\n{self.extra}\r\n").encode()
        r, w = await self._conn()
        reusable = False
        try:
            w.write(head + body)
            status_line = await r.readline()
            if not status_line:
                raise ConnectionError("server closed the connection")
            status = int(status_line.split(b" ", 2)[1])
            headers = {}
            while True:
                line = await r.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                k, _, v = line.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip().lower()
            chunked = "chunked" in headers.get("transfer-encoding", "")
            length = int(headers["content-length"]) if "content-length" in headers else None
            if status != 200:
                data = await _read_body(r, chunked, length)
                raise HTTPStatusError(f"HTTP {status}: {data.decode(errors='replace')[:200]}")
            buf = b""
            async for data in _chunks(r, chunked, length):
                buf += data
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    for line in event.split(b"\n"):
                        if line.startswith(b"data:"):
                            yield line[5:].strip()
            reusable = headers.get("connection") != "close"
        finally:
            if reusable:
                self.idle.append((r, w))
            else:
                w.close()


async def _chunks(r: asyncio.StreamReader, chunked: bool, length: int | None) -> AsyncIterator[bytes]:
    if chunked:
        while True:
            size = int((await r.readline()).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await r.readline()  # the empty line after the last chunk (no trailers expected)
                return
            data = await r.readexactly(size + 2)
            yield data[:-2]
    elif length is not None:
        yield await r.readexactly(length)
    else:
        while data := await r.read(65536):
            yield data


async def _read_body(r, chunked: bool, length: int | None) -> bytes:
    return b"".join([c async for c in _chunks(r, chunked, length)])
