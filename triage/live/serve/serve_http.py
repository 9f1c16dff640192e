"""The HTTP face of `triage serve` (the standard library's ThreadingHTTPServer).

    POST /alertmanager   an Alertmanager webhook payload (version "4") -> 200 {"accepted", "duplicates", "resolved"}
    GET  /healthz        200 {"status": "ok", "queue": N} (no token asked: for liveness probes)
    GET  /metrics        the receiver's own series (prometheus-client text)

Every request is checked in the order that costs least: the token (401), the rate (429), the
body's declared size (411, 413: refused before a byte of it is read), then the payload whole
(400 with the reason); only then is anything queued (429 when the queue has no room, 503 while
stopping or when the journal cannot be written). Answers are JSON with an `error` field saying why.
"""
from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ...errors import TriageError
from .alert_payload import PayloadError, parse_payload
from .alert_queue import AlertQueue, QueueFull, Stopping

log = logging.getLogger("triage.serve")
MAX_BODY = 1 << 20
READ_TIMEOUT_S = 10.0      # a client that opens a connection and sends nothing is dropped


@dataclass
class Limits:
    token: str | None = None        # required as `Authorization: Bearer TOKEN` when set
    max_body: int = MAX_BODY
    rate: float = 20.0              # requests per second, with a burst of twice that


class RateLimit:
    """A token bucket over all clients: Alertmanager is one client, and a flood from anywhere else
    must not slow the queue down either."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, 2 * rate)
        self.tokens = self.capacity
        self.at = time.monotonic()
        self.lock = threading.Lock()

    def take(self) -> float:
        """0 when the request may go on, else the seconds until it could."""
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
            self.at = now
            if self.tokens >= 1:
                self.tokens -= 1
                return 0.0
            return (1 - self.tokens) / self.rate


class Server(ThreadingHTTPServer):
    daemon_threads = True          # a stuck client never holds the shutdown
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], queue: AlertQueue, limits: Limits) -> None:
        self.queue = queue
        self.limits = limits
        self.bucket = RateLimit(limits.rate)
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    server: Server
    timeout = READ_TIMEOUT_S
    server_version = "triage-serve"
    sys_version = ""

    # -- routes ------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._json(200, {"status": "stopping" if self.server.queue.stopping else "ok",
                             "queue": self.server.queue.depth()})
        elif path == "/metrics":
            if self._authorized():
                body, ctype = self.server.queue.stats.render()
                self._send(200, body, ctype)
        else:
            self._json(404, {"error": f"no such path {path[:100]!r} (POST /alertmanager, GET /healthz, GET /metrics)"})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path != "/alertmanager":
            self._json(404, {"error": f"no such path {path[:100]!r}: Alertmanager posts to /alertmanager"})
            return
        if not self._authorized():
            return
        wait = self.server.bucket.take()
        if wait:
            self._json(429, {"error": "rate limit: too many requests"}, {"Retry-After": str(max(1, round(wait)))},
                       close=True)
            return
        body = self._body()
        if body is None:
            return
        try:
            payload = parse_payload(body)
        except PayloadError as exc:
            log.warning("400 from %s: %s", self.client_address[0], exc)
            self._json(400, {"error": str(exc)})
            return
        try:
            receipt = self.server.queue.submit(payload)
        except QueueFull as exc:
            log.warning("429: queue full: %s; payload of %d alert(s) from %s refused", exc, len(payload.alerts),
                        self.client_address[0])
            self._json(429, {"error": f"queue full: {exc}"}, {"Retry-After": "30"})
            return
        except Stopping:
            self._json(503, {"error": "shutting down"}, {"Retry-After": "10"})
            return
        except (OSError, TriageError) as exc:     # the journal cannot be written: nothing was accepted
            log.error("journal not written: %s; payload of %d alert(s) refused", exc, len(payload.alerts))
            self._json(503, {"error": "the receiver cannot keep alerts now"}, {"Retry-After": "30"})
            return
        self._json(200, {"status": "ok", **receipt.json()})

    def do_PUT(self) -> None:
        self._json(405, {"error": "use POST /alertmanager"}, close=True)

    do_DELETE = do_PATCH = do_PUT

    # -- checks ------------------------------------------------------------------------------------

    def _authorized(self) -> bool:
        token = self.server.limits.token
        if not token:
            return True
        given = self.headers.get("Authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode()):
            return True
        self._json(401, {"error": "a bearer token is required (Authorization: Bearer ...)"},
                   {"WWW-Authenticate": 'Bearer realm="triage serve"'}, close=True)
        return False

    def _body(self) -> bytes | None:
        """The request body, or None once the error is answered."""
        if self.headers.get("Transfer-Encoding"):
            self._json(411, {"error": "send the body with a Content-Length (no chunked transfer)"}, close=True)
            return None
        raw = self.headers.get("Content-Length")
        if raw is None:
            self._json(411, {"error": "Content-Length is required"}, close=True)
            return None
        try:
            length = int(raw)
        except ValueError:
            length = -1
        if length < 0:
            self._json(400, {"error": f"Content-Length {raw[:40]!r} is not a size"}, close=True)
            return None
        if length > self.server.limits.max_body:
            log.warning("413 from %s: a body of %d bytes", self.client_address[0], length)
            self._json(413, {"error": f"the body is {length} bytes; at most {self.server.limits.max_body} are "
                                      "read"}, close=True)
            return None
        try:
            body = self.rfile.read(length)
        except OSError:         # a timeout or a reset: nobody is left to answer
            self.close_connection = True
            return None
        if len(body) != length:
            self._json(400, {"error": f"the body ended after {len(body)} of {length} bytes"}, close=True)
            return None
        return body

    # -- answers -----------------------------------------------------------------------------------

    def _json(self, code: int, doc: dict[str, Any], headers: dict[str, str] | None = None,
              close: bool = False) -> None:
        from ...redact import redact_output

        self._send(code, (json.dumps(redact_output(doc)) + "\n").encode(), "application/json", headers, close)

    def _send(self, code: int, body: bytes, ctype: str, headers: dict[str, str] | None = None,
              close: bool = False) -> None:
        if close:
            self.close_connection = True
        try:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            if close:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except OSError:         # the client went away: nothing to tell it
            self.close_connection = True

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        path = self.path.split("?", 1)[0] if isinstance(self.path, str) else "-"
        known = path if path in ("/alertmanager", "/healthz", "/metrics") else "other"
        self.server.queue.stats.requests.labels(known, str(int(code)) if isinstance(code, int) else str(code)).inc()
        if known != "/healthz" and known != "/metrics":
            log.debug("%s %s %s -> %s", self.client_address[0], self.command, path[:100], code)

    def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 (the base class's name)
        log.debug("%s " + format, self.client_address[0], *args)
