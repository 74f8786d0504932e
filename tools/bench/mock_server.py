"""A mock OpenAI-compatible completions server: as fast as it can, or misbehaving on purpose.

Used by tests (real processes, real HTTP on loopback) and by benchmarks/loadgen_overhead.py
(is our load generator the bottleneck?). Raw asyncio HTTP/1.1 so the server costs little CPU.

    python -m tools.bench.mock_server --port P --model NAME [--mode ok|never_ready|die|die_after]
        [--ttft-s S] [--itl-s S] [--answers FILE.json] [--ready-line TEXT] [--die-after-s S]
        [--log-line TEXT] [--max-model-len N]

Modes: ok (ready line printed, /health 200); never_ready (serves 503 on /health, no ready line);
die (prints --log-line then exits 1 at once); die_after (serves, then exits hard after
--die-after-s). Each stream chunk is one token; generation always runs to max_tokens (ignore_eos).
`--answers` maps a question text to a completion; a prompt gets the answer of the question that
appears last in it (few-shot prompts repeat earlier questions). `--max-model-len N` answers a prompt
of more than N words with vLLM's HTTP 400 "This model's maximum context length is N tokens ...".
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

READY = "Application startup complete."


def _response(status: int, body: bytes, ctype: str = "application/json") -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}[status]
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: {ctype}\r\ncontent-length: {len(body)}\r\n\r\n"
            ).encode() + body


class Mock:
    def __init__(self, args: argparse.Namespace):
        self.a = args
        self.answers: dict[str, str] = {}
        if args.answers:
            with open(args.answers) as f:
                self.answers = json.load(f)
        self.ready = args.mode != "never_ready"
        self.refused = 0

    def answer(self, prompt: str, max_tokens: int) -> list[str]:
        best, pos = None, -1
        for q, a in self.answers.items():
            p = prompt.rfind(q)
            if p > pos:
                best, pos = a, p
        if best is not None:
            words = [w + " " for w in best.split(" ")]
            words[-1] = words[-1][:-1]
            return words[:max_tokens]
        return ["tok "] * max_tokens

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:] if l)}
                body = await reader.readexactly(int(headers.get("content-length", 0) or 0))
                await self.route(method, path, body, writer)
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def route(self, method: str, path: str, body: bytes, w: asyncio.StreamWriter) -> None:
        if path == "/health":
            w.write(_response(200 if self.ready else 503, b""))
        elif path == "/v1/models":
            w.write(_response(200, json.dumps({"object": "list", "data": [
                {"id": self.a.model, "object": "model", "owned_by": "mock"}]}).encode()))
        elif path == "/v1/completions" and method == "POST":
            await self.completions(json.loads(body or b"{}"), w)
        else:
            w.write(_response(404, b'{"detail":"Not Found"}'))
        await w.drain()

    async def completions(self, req: dict, w: asyncio.StreamWriter) -> None:
        if req.get("model") != self.a.model:
            msg = {"error": {"message": f"The model `{req.get('model')}` does not exist.",
                             "type": "NotFoundError", "param": None, "code": 404}}
            w.write(_response(404, json.dumps(msg).encode()))
            return
        prompt = req.get("prompt", "")
        prompt = prompt[0] if isinstance(prompt, list) else prompt
        n_in = len(prompt.split())
        if self.a.max_model_len and n_in > self.a.max_model_len:  # vLLM 0.32's words and status
            self.refused += 1
            print(f"refused request {self.refused}: {n_in} prompt tokens", flush=True)
            msg = {"error": {"message": f"This model's maximum context length is {self.a.max_model_len} tokens. "
                             f"However, your prompt contains {n_in} input tokens, which exceeds this limit even "
                             "without any output tokens. Please reduce the length of the input prompt.",
                             "type": "BadRequestError", "param": "input_tokens", "code": 400}}
            w.write(_response(400, json.dumps(msg).encode()))
            return
        toks = self.answer(prompt, int(req.get("max_tokens", 16)))
        if self.a.ttft_s:
            await asyncio.sleep(self.a.ttft_s)
        if not req.get("stream"):
            out = {"id": "cmpl-mock", "object": "text_completion", "model": self.a.model, "choices": [
                {"index": 0, "text": "".join(toks), "finish_reason": "length"}],
                "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(toks)}}
            w.write(_response(200, json.dumps(out).encode()))
            return
        w.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for i, t in enumerate(toks):
            ev = {"id": "cmpl-mock", "object": "text_completion", "model": self.a.model,
                  "choices": [{"index": 0, "text": t, "finish_reason": "length" if i == len(toks) - 1 else None}]}
            self._chunk(w, b"data: " + json.dumps(ev).encode() + b"\n\n")
            if self.a.itl_s:
                await w.drain()
                await asyncio.sleep(self.a.itl_s)
        if (req.get("stream_options") or {}).get("include_usage"):
            usage = {"id": "cmpl-mock", "object": "text_completion", "model": self.a.model, "choices": [],
                     "usage": {"prompt_tokens": len(prompt.split()), "completion_tokens": len(toks)}}
            self._chunk(w, b"data: " + json.dumps(usage).encode() + b"\n\n")
        self._chunk(w, b"data: [DONE]\n\n")
        self._chunk(w, b"")

    @staticmethod
    def _chunk(w: asyncio.StreamWriter, data: bytes) -> None:
        w.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")


async def _main(a: argparse.Namespace) -> None:
    if a.mode == "die":
        print(a.log_line or "RuntimeError: Engine core initialization failed.", flush=True)
        sys.exit(1)
    mock = Mock(a)
    try:
        server = await asyncio.start_server(mock.handle, a.host, a.port, backlog=4096)
    except OSError as e:
        print(f"ERROR: [Errno {e.errno}] error while attempting to bind on address "
              f"('{a.host}', {a.port}): address already in use", flush=True)
        sys.exit(1)
    print(f"INFO:     Uvicorn running on http://{a.host}:{a.port} (mock, pid {os.getpid()})", flush=True)
    if a.log_line:
        print(a.log_line, flush=True)
    if mock.ready:
        print(f"INFO:     {a.ready_line}", flush=True)
    if a.mode == "die_after":
        asyncio.get_running_loop().call_later(a.die_after_s, os._exit, 1)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="mock_server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="mock")
    p.add_argument("--mode", choices=["ok", "never_ready", "die", "die_after"], default="ok")
    p.add_argument("--ttft-s", type=float, default=0.0)
    p.add_argument("--itl-s", type=float, default=0.0)
    p.add_argument("--die-after-s", type=float, default=1.0)
    p.add_argument("--answers")
    p.add_argument("--ready-line", default=READY)
    p.add_argument("--log-line", default="")
    p.add_argument("--max-model-len", type=int, default=0, help="refuse longer prompts (in words) with HTTP 400")
    a = p.parse_args(argv)
    try:
        asyncio.run(_main(a))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
