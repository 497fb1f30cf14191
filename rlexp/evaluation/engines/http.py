"""JSON over HTTP with a deadline and a bounded body: the one client every rlexp network call uses.

A server can fail in more ways than refusing the connection: it can accept and never answer, answer
one byte a second, send a gigabyte, send bytes that are not UTF-8 or not JSON, cut the connection
mid-body, reset it, or speak something that is not HTTP. Each of those must end, within a stated
time, in the same error — :class:`HttpFailure`, one line, counted by the caller (the judge's
``judge_error``; the eval engine's one-line failure) — never a traceback and never a hang.

The limits (:class:`HttpLimits`):

- ``connect_timeout_s``: to open the TCP connection;
- ``read_timeout_s``: the longest silence between two reads of one answer;
- ``timeout_s``: the whole call — every try, every backoff — after which it is abandoned: a watchdog
  shuts the socket down at the deadline, so a server trickling bytes (each read well inside the
  read timeout) is cut there too;
- ``max_response_bytes``: the body read, at most; a larger one is refused, not retried;
- ``retries`` with exponential ``backoff_s``: connection errors, protocol errors, bodies that are not
  UTF-8 or not JSON, and HTTP 408/409/429/5xx are tried again while time remains; any other HTTP
  status is final.

Each try opens and closes its own connection (``http.client``), so there is no pool to leak. The
proxy variables are honoured as urllib honours them (``http_proxy``/``https_proxy``, ``no_proxy``;
an https URL goes through the proxy's CONNECT tunnel).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

from rlexp.errors import ServiceError

RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
_CHUNK = 1 << 16


class HttpFailure(ServiceError):
    """The call did not produce a usable JSON answer within its limits (one line, why)."""

    def __init__(self, message: str, *, retryable: bool = True):
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True)
class HttpLimits:
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 120.0
    timeout_s: float = 600.0
    max_response_bytes: int = 32 << 20
    retries: int = 5
    backoff_s: float = 0.5

    def __post_init__(self) -> None:
        for name in ("connect_timeout_s", "read_timeout_s", "timeout_s", "max_response_bytes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")
        if self.retries < 0 or self.backoff_s < 0:
            raise ValueError("retries and backoff_s must be >= 0")


def check_url(url: str) -> urllib.parse.SplitResult:
    """``url`` split, if rlexp may call it: http or https with a host, and no credentials in it
    (``https://user:KEY@host`` would land in every file that records the URL)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HttpFailure(f"{_safe(url)}: expected an http:// or https:// URL with a host", retryable=False)
    if parts.username is not None or parts.password is not None:
        raise HttpFailure(f"{_safe(url)}: credentials in the URL are refused; name the variable holding the key "
                          "in api_key_env", retryable=False)
    try:
        parts.port  # noqa: B018  (a port that is not a number raises here)
    except ValueError as exc:
        raise HttpFailure(f"{_safe(url)}: {exc}", retryable=False) from None
    return parts


def _safe(url: str) -> str:
    """``url`` for a message: any userinfo replaced, cut to 200 characters."""
    try:
        parts = urllib.parse.urlsplit(url)
        if "@" in parts.netloc:
            url = urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))
    except ValueError:
        url = "<an unparsable URL>"
    return url if len(url) <= 200 else url[:199] + "…"


def post_json(url: str, body: Any, limits: HttpLimits, headers: dict[str, str] | None = None) -> Any:
    """POST ``body`` as JSON to ``url`` and return the decoded JSON answer, or raise
    :class:`HttpFailure` within ``limits.timeout_s`` (plus the scheduler's slack)."""
    return request_json("POST", url, limits, body=json.dumps(body).encode("utf-8"), headers=headers)


def get_json(url: str, limits: HttpLimits, headers: dict[str, str] | None = None) -> Any:
    return request_json("GET", url, limits, headers=headers)


def request_json(method: str, url: str, limits: HttpLimits, *, body: bytes | None = None,
                 headers: dict[str, str] | None = None) -> Any:
    parts = check_url(url)
    sent_headers = {"Accept": "application/json", **(headers or {})}
    if body is not None:
        sent_headers.setdefault("Content-Type", "application/json")
    deadline = time.monotonic() + limits.timeout_s
    last = "no try made"
    tries = 0
    for attempt in range(limits.retries + 1):
        if attempt:
            pause = limits.backoff_s * 2 ** (attempt - 1)
            if time.monotonic() + pause >= deadline:
                break
            time.sleep(pause)
        if time.monotonic() >= deadline:
            break
        tries += 1
        try:
            return _one_try(method, parts, body, sent_headers, limits, deadline)
        except HttpFailure as exc:
            if not exc.retryable:
                raise HttpFailure(f"{_safe(url)}: {exc}", retryable=False) from None
            last = str(exc)
    else:
        raise HttpFailure(f"{_safe(url)}: failed after {tries} tries ({last})", retryable=False)
    raise HttpFailure(f"{_safe(url)}: no answer within the deadline of {limits.timeout_s:g} s "
                      f"({tries} tries; last: {last})", retryable=False)


def _one_try(method: str, parts: urllib.parse.SplitResult, body: bytes | None, headers: dict[str, str],
             limits: HttpLimits, deadline: float) -> Any:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise HttpFailure("deadline reached")
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    proxy = _proxy_for(parts)
    if proxy is None:
        conn = connection_class(parts.hostname, parts.port, timeout=min(limits.connect_timeout_s, remaining))
    elif parts.scheme == "https":  # through the proxy's CONNECT tunnel, as urllib does
        conn = connection_class(proxy.hostname, proxy.port, timeout=min(limits.connect_timeout_s, remaining))
        conn.set_tunnel(parts.hostname, parts.port)
    else:  # a plain-HTTP proxy takes the whole URL as the request target
        conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=min(limits.connect_timeout_s, remaining))
        target = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path or "/", parts.query, ""))
    expired = threading.Event()
    opened: list[socket.socket] = []  # http.client forgets its socket once an answer says "close"

    def cut() -> None:  # the watchdog: at the deadline, whatever read is blocked returns
        expired.set()
        for sock in opened:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(remaining, cut)
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.connect()
        opened.append(conn.sock)
        if expired.is_set():  # the deadline passed while connecting
            raise HttpFailure("deadline reached")
        conn.sock.settimeout(limits.read_timeout_s)
        conn.request(method, target, body=body, headers=headers)
        response = conn.getresponse()
        status = response.status
        if status in RETRY_STATUS:
            raise HttpFailure(f"HTTP {status}")
        if 300 <= status < 400:  # a POST is not replayed elsewhere: the spec names the server itself
            location = (response.getheader("Location") or "")[:200]
            raise HttpFailure(f"HTTP {status}: redirected to {location!r}; point the URL there", retryable=False)
        if status >= 400:
            detail = response.read(300).decode("utf-8", "replace").replace("\n", " ")
            raise HttpFailure(f"HTTP {status}: {detail}", retryable=False)
        length = response.getheader("Content-Length")
        if length and length.strip().isdigit() and int(length) > limits.max_response_bytes:
            raise HttpFailure(f"answer of {int(length)} bytes, over the limit of {limits.max_response_bytes}",
                              retryable=False)
        data = bytearray()
        while len(data) <= limits.max_response_bytes:
            chunk = response.read(_CHUNK)
            if not chunk:
                break
            data += chunk
            if expired.is_set():
                break
        if expired.is_set():
            raise HttpFailure("deadline reached mid-answer")
        if len(data) > limits.max_response_bytes:
            raise HttpFailure(f"answer over the limit of {limits.max_response_bytes} bytes", retryable=False)
        if length and length.strip().isdigit() and len(data) < int(length):  # http.client does not say
            raise HttpFailure(f"connection cut mid-answer ({len(data)} of {int(length)} bytes read)")
    except HttpFailure:
        raise
    except (http.client.HTTPException, OSError, ValueError) as exc:
        if expired.is_set():
            raise HttpFailure("deadline reached") from None
        raise HttpFailure(_describe(exc)) from None
    finally:
        watchdog.cancel()
        conn.close()
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HttpFailure(f"answer is not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise HttpFailure(f"answer is not JSON ({text[:60]!r})") from None


def _proxy_for(parts: urllib.parse.SplitResult) -> urllib.parse.SplitResult | None:
    """The HTTP proxy the environment names for this URL (``https_proxy``/``http_proxy``, unless
    ``no_proxy`` covers the host: urllib's own reading of them), or None."""
    import urllib.request

    proxy = urllib.request.getproxies().get(parts.scheme)
    if not proxy or urllib.request.proxy_bypass(parts.hostname or ""):
        return None
    proxy_parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    if proxy_parts.scheme != "http" or not proxy_parts.hostname:
        raise HttpFailure(f"the {parts.scheme} proxy {_safe(proxy)} is not an http:// proxy", retryable=False)
    return proxy_parts


def _describe(exc: BaseException) -> str:
    """One line for a transport or protocol error (no traceback, no multi-line repr)."""
    if isinstance(exc, socket.timeout | TimeoutError):
        return "no data within the read timeout"
    if isinstance(exc, http.client.IncompleteRead):
        return f"connection cut mid-answer ({len(exc.partial)} bytes read)"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "connection closed without an answer"
    if isinstance(exc, http.client.BadStatusLine):
        return f"not an HTTP answer ({str(exc)[:60]!r})"
    if isinstance(exc, http.client.LineTooLong):
        return "not an HTTP answer (a header line too long)"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
