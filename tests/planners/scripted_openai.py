"""A scripted OpenAI-compatible chat server on loopback: real HTTP, for the real `openai` client.

Each POST /v1/chat/completions takes the next step of the script. A step is one of
- `reply(tool_calls=[("name", {args} or "raw json text")], content="...")`: a chat completion;
- `status(429 | 500 | ...)`: an error response with an OpenAI-style error body;
- `delay(seconds, then)`: wait before answering `then` (a client with a shorter timeout gives up);
- a callable `f(request_json) -> step`: a "model" that reads the conversation and decides.
Every request (JSON body and headers) is recorded, so tests can assert what the model was shown.
When the script runs out, the server answers 500 "script exhausted" (a test then fails loudly).
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Step:
    kind: str  # reply | status | delay
    tool_calls: list | None = None
    content: str = ""
    code: int = 200
    seconds: float = 0.0
    then: object = None


def reply(tool_calls=None, content: str = "") -> Step:
    return Step("reply", tool_calls=tool_calls or [], content=content)


def status(code: int) -> Step:
    return Step("status", code=code)


def delay(seconds: float, then: Step) -> Step:
    return Step("delay", seconds=seconds, then=then)


class ScriptedOpenAI:
    def __init__(self, script: list | None = None, *, repeat_last: bool = False):
        self.script = list(script or [])
        self.repeat_last = repeat_last
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self._lock = threading.Lock()
        self._n = 0
        srv = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with srv._lock:
                    srv.requests.append(body)
                    srv.headers.append({k.lower(): v for k, v in self.headers.items()})
                    step = srv._next()
                while callable(step):
                    step = step(body)
                if step is not None and step.kind == "delay":
                    time.sleep(step.seconds)  # the scripted slowness under test, not a race fix
                    step = step.then
                try:
                    if step is None:
                        self._send(500, {"error": {"message": "script exhausted", "type": "server_error"}})
                    elif step.kind == "status":
                        self._send(step.code, {"error": {"message": f"scripted {step.code}", "type": "server_error",
                                                         "code": step.code}})
                    else:
                        self._send(200, srv._completion(body, step))
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client timed out and hung up

            def _send(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _next(self):
        if self._n < len(self.script):
            s = self.script[self._n]
            self._n += 1
            return s
        if self.repeat_last and self.script:
            return self.script[-1]
        return None

    def _completion(self, body: dict, step: Step) -> dict:
        calls = []
        for i, (name, args) in enumerate(step.tool_calls):
            calls.append({"id": f"call_{len(self.requests)}_{i}", "type": "function",
                          "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}})
        msg = {"role": "assistant", "content": step.content or None}
        if calls:
            msg["tool_calls"] = calls
        prompt = len(json.dumps(body.get("messages", []))) // 4
        done = len(json.dumps(msg)) // 4
        return {"id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
                "model": body.get("model", "scripted"),
                "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedOpenAI":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def tool_results(body: dict) -> list[str]:
    """The tool-result messages the client sent in one request."""
    return [m["content"] for m in body.get("messages", []) if m.get("role") == "tool"]
