"""Open a page in real headless Chromium and report what a person would see: console errors,
uncaught exceptions, failed loads, each image's natural size, a full-page screenshot.

Chromium is driven through the DevTools protocol over --remote-debugging-pipe (fd 3: commands in,
fd 4: events out, NUL-terminated JSON), so no websocket library or driver binary is needed.
`chromium()` is None where Debian's `chromium` package is not installed.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

IMAGES_JS = """JSON.stringify({
  images: Array.from(document.images).map(i => ({alt: i.alt, complete: i.complete,
                                                  naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight})),
  text: document.body ? document.body.innerText.length : 0,
  title: document.title})"""


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


@dataclass
class PageReport:
    images: list[dict]
    text_chars: int
    title: str
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, failed loads
    screenshot: Path | None = None


class _Pipe:
    def __init__(self, proc, wfd: int, rfd: int):
        self.proc, self.w, self.r, self.buf, self.next_id = proc, wfd, rfd, b"", 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read(timeout)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict:
        for i, e in enumerate(self.events):
            if e.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self._read(timeout)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def _read(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while b"\0" not in self.buf:
            if time.monotonic() > deadline:
                raise TimeoutError("no answer from chromium")
            import select
            ready, _, _ = select.select([self.r], [], [], 0.5)
            if ready:
                chunk = os.read(self.r, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium exited (rc {self.proc.poll()})")
                self.buf += chunk
        raw, _, self.buf = self.buf.partition(b"\0")
        return json.loads(raw)


def open_page(path: Path, screenshot: Path, *, binary: str | None = None, width: int = 1200) -> PageReport:
    """Load `path` (a local file) in headless Chromium, wait for the load event, then read the
    images' sizes and save a full-page PNG screenshot to `screenshot`."""
    binary = binary or chromium()
    if binary is None:
        raise FileNotFoundError("chromium is not installed")
    to_chrome_r, to_chrome_w = os.pipe()
    from_chrome_r, from_chrome_w = os.pipe()
    profile = tempfile.mkdtemp(prefix="chromium-")
    argv = [binary, "--headless=new", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
            f"--user-data-dir={profile}", f"--window-size={width},900", "about:blank"]

    def fds():  # the protocol's fixed descriptors: 3 for commands to Chromium, 4 for its answers
        import fcntl  # move both ends above 3/4 first, so neither dup2 overwrites the other
        a, b = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_chrome_r, from_chrome_w))
        os.dup2(a, 3)
        os.dup2(b, 4)
    # pass_fds keeps 3 and 4 open through subprocess's close_fds, which runs after preexec_fn
    proc = subprocess.Popen(argv, pass_fds=(3, 4), preexec_fn=fds,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    os.close(to_chrome_r), os.close(from_chrome_w)
    pipe = _Pipe(proc, to_chrome_w, from_chrome_r)
    try:
        tid = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = pipe.send("Target.attachToTarget", {"targetId": tid, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            pipe.send(f"{domain}.enable", session=sid)
        pipe.send("Page.navigate", {"url": Path(path).resolve().as_uri()}, session=sid)
        pipe.wait_event("Page.loadEventFired", timeout=60)
        got = pipe.send("Runtime.evaluate", {"expression": IMAGES_JS, "returnByValue": True}, session=sid)
        info = json.loads(got["result"]["value"])
        shot = pipe.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True},
                         session=sid, timeout=60)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        rep = PageReport(images=info["images"], text_chars=info["text"], title=info["title"], screenshot=screenshot)
        rep.errors = _errors(pipe.events)
        return rep
    finally:
        try:
            pipe.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(to_chrome_w), os.close(from_chrome_r)
        shutil.rmtree(profile, ignore_errors=True)


def _errors(events: list[dict]) -> list[str]:
    out = []
    for e in events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            out.append("console: " + " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif m == "Runtime.exceptionThrown":
            out.append("exception: " + p.get("exceptionDetails", {}).get("text", ""))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            out.append("log: " + p["entry"].get("text", ""))
        elif m == "Network.loadingFailed":
            out.append(f"load failed: {p.get('errorText')} ({p.get('type')})")
    return out
