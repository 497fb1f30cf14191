"""A JSON-over-HTTP server on 127.0.0.1 for tests that stand in for an OpenAI-compatible endpoint.

``LoopbackJsonServer(answer)`` serves every POST through ``answer(path, body, headers) -> (status,
payload)`` (body and payload as JSON; ``headers`` the request's, e.g. its Authorization), one request at a time (the stubs keep request logs and a model that
serves one call at once); a context manager starts and stops it. Each stub says only what it
answers; the HTTP plumbing is here once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[str, dict[str, Any], Mapping[str, str]], tuple[int, Any]]


class LoopbackJsonServer:
    def __init__(self, answer: Answer, *, prefix: str = ""):
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    status, payload = answer(self.path, body, self.headers)
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}{prefix}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
