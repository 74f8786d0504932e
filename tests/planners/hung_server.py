"""An OpenAI-compatible endpoint that has hung: it accepts every connection and never answers
(issue 13: such a server cost 245 s per decision). `trickle=True` answers the status line and
headers and then one byte of body now and then, so no single read ever times out; it hangs up after
`trickle_bytes` of them (so a client without a total deadline fails this test instead of hanging it).

Calls are counted from the accepted connections (the client makes one per call: it has no answered
connection to reuse). On exit the server stops accepting and takes what is still queued in the
kernel's backlog too, so the count does not depend on how quickly the accept thread ran."""
from __future__ import annotations

import select
import socket
import threading

HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")


class HungServer:
    def __init__(self, *, trickle: bool = False, trickle_every_s: float = 0.05, trickle_bytes: int = 400):
        self.trickle, self.every, self.drops = trickle, trickle_every_s, trickle_bytes
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()  # wakes the accept loop on exit
        self.conns: list[socket.socket] = []
        self.requests: list[bytes] = []  # the first bytes of each call, read on exit
        self.dripped: list[int] = []  # bytes of body sent on each trickled connection before it ended
        self._threads = [threading.Thread(target=self._accept, daemon=True)]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while True:
            ready, _, _ = select.select([self.sock, self._wake_r], [], [])
            if self._wake_r in ready:
                return
            self._took(self.sock.accept()[0])

    def _took(self, conn: socket.socket) -> None:
        self.conns.append(conn)
        if self.trickle:
            t = threading.Thread(target=self._drip, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _drip(self, conn: socket.socket) -> None:
        i = len(self.dripped)
        self.dripped.append(0)
        try:
            conn.sendall(HEAD)
            for _ in range(self.drops):
                if self.stop.wait(self.every):  # the scripted slowness under test
                    return
                conn.sendall(b" ")
                self.dripped[i] += 1
            conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # the client gave up and closed

    def __enter__(self) -> "HungServer":
        self._threads[0].start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self._wake_w.send(b"x")
        self._threads[0].join()
        for t in self._threads[1:]:
            t.join()
        self._wake_r.close()
        self._wake_w.close()
        self.sock.setblocking(False)
        while True:  # connections the kernel completed that the accept loop had not taken yet
            try:
                self.conns.append(self.sock.accept()[0])
            except BlockingIOError:
                break
        self.sock.close()
        for c in self.conns:
            c.settimeout(5)  # a call's request was written before its client began waiting for the answer
            try:
                self.requests.append(c.recv(64))
            except OSError:
                self.requests.append(b"")
            c.close()

    @property
    def calls(self) -> int:
        return len(self.conns)
