"""Servers on 127.0.0.1 that misbehave the ways a real endpoint does, for the fault-injection tests.

``FaultServer(fault, good=...)`` listens on a free port and answers every connection with ``fault``:

- ``hang``: reads the request, never answers;
- ``trickle``: a valid header announcing 100 kB, then one byte every 0.1 s;
- ``huge``: a valid header without a length, then bytes until the client goes away (at most 256 MB);
- ``huge_declared``: a Content-Length of 10 GB, then the same stream;
- ``non_json``: HTTP 200 with a text body;
- ``non_utf8``: HTTP 200 with bytes that are not UTF-8;
- ``cut``: a header announcing 1000 bytes, 20 of them, then the connection closed;
- ``reset``: reads the request, then resets the connection (RST: SO_LINGER 0);
- ``non_http``: answers an SSH banner;
- ``flaky``: 429, then 500, then ``good(path, body)`` as JSON (the retry path), counted per request body.

Every loop is bounded in count and in time (the stop event ends them all; ``__exit__`` joins each
thread with a timeout).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

FAULTS = ("hang", "trickle", "huge", "huge_declared", "non_json", "non_utf8", "cut", "reset", "non_http", "flaky")
MAX_HANG_S = 60.0  # a hanging handler gives up by then even if the test forgot to stop it


def _read_request(conn: socket.socket) -> tuple[str, bytes]:
    """The request's path and body (Content-Length bodies only; what the clients send)."""
    conn.settimeout(5)
    data = b""
    for _ in range(1000):
        if b"\r\n\r\n" in data:
            break
        chunk = conn.recv(65536)
        if not chunk:
            return "", b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    for _ in range(10000):
        if len(body) >= length:
            break
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    path = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else ""
    return path, body


def _header(status: int, length: int | None, reason: str = "OK") -> bytes:
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nConnection: close\r\n"
    if length is not None:
        head += f"Content-Length: {length}\r\n"
    return (head + "\r\n").encode()


class FaultServer:
    def __init__(self, fault: str, good: Callable[[str, Any], Any] | None = None):
        if fault not in FAULTS:
            raise ValueError(fault)
        self.fault, self.good = fault, good
        self.connections = 0
        self.tries: dict[bytes, int] = {}
        self.stop = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.threads: list[threading.Thread] = []
        self.lock = threading.Lock()
        self.acceptor = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self) -> FaultServer:
        self.acceptor.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.acceptor.join(timeout=10)
        for t in self.threads:
            t.join(timeout=10)
        self.sock.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            with self.lock:
                self.connections += 1
                number = self.connections
            t = threading.Thread(target=self._serve, args=(conn, number), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket, number: int) -> None:
        try:
            with conn:
                path, body = _read_request(conn)
                getattr(self, "_" + self.fault)(conn, path, body, number)
        except OSError:
            pass  # the client went away: what a deadline does

    def _hang(self, conn, path, body, number):
        self.stop.wait(MAX_HANG_S)

    def _trickle(self, conn, path, body, number):
        conn.sendall(_header(200, 100_000))
        for _ in range(int(MAX_HANG_S / 0.1)):
            if self.stop.wait(0.1):
                return
            conn.sendall(b" ")

    def _huge(self, conn, path, body, number, declared=None):
        conn.sendall(_header(200, declared))
        block = b"[" + b"0," * 32767 + b"0"
        started = time.monotonic()
        for _ in range(4096):  # 256 MB at most
            if self.stop.is_set() or time.monotonic() - started > MAX_HANG_S:
                return
            conn.sendall(block)

    def _huge_declared(self, conn, path, body, number):
        self._huge(conn, path, body, number, declared=10 << 30)

    def _non_json(self, conn, path, body, number):
        text = b"<html>Service temporarily unavailable</html>"
        conn.sendall(_header(200, len(text)) + text)

    def _non_utf8(self, conn, path, body, number):
        data = b'{"choices": [{"text": "\xff\xfe\xfd"}]}'
        conn.sendall(_header(200, len(data)) + data)

    def _cut(self, conn, path, body, number):
        conn.sendall(_header(200, 1000) + b'{"choices": [{"text"')

    def _reset(self, conn, path, body, number):
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def _non_http(self, conn, path, body, number):
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    def _flaky(self, conn, path, body, number):
        with self.lock:  # counted per request (its body), so concurrent clients each see 429, 500, then an answer
            self.tries[body] = self.tries.get(body, 0) + 1
            number = self.tries[body]
        if number % 3 == 1:
            conn.sendall(_header(429, 2, "Too Many Requests") + b"{}")
        elif number % 3 == 2:
            conn.sendall(_header(500, 2, "Internal Server Error") + b"{}")
        else:
            data = json.dumps(self.good(path, json.loads(body))).encode()
            conn.sendall(_header(200, len(data)) + data)
