"""HTTP endpoints with vLLM's shapes: /health, /v1/models, /v1/completions, /metrics.

Every request gets a uvicorn-style access line in the log. A completion is a real request to
the simulated engine: the handler thread waits (bounded) until the engine has generated its
`max_tokens`, so concurrency, queues and failures are those of the engine loop.
"""
from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from .args import SimArgs
from .engine import Engine, EngineDead, Request
from .metrics import CONTENT_TYPE, SimMetrics
from .texts import ENGINE_DEAD, VERSION
from .vlog import Proc, VllmLog

REQUEST_LIMIT_S = 600.0          # no handler waits longer, even for a hung engine
MAX_BODY = 16 << 20
DEFAULT_MAX_TOKENS = 16
_WORDS = ("the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog")


@dataclass
class App:
    args: SimArgs
    log: VllmLog
    api: Proc
    engine: Engine
    metrics: SimMetrics
    created: int


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True        # a hung completion must not keep the process alive at exit
    allow_reuse_address = True
    request_queue_size = 2048    # uvicorn's --backlog default: a spike of connections queues, never resets
    app: App


class Handler(BaseHTTPRequestHandler):
    server: SimHTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    timeout = 60          # an idle keep-alive connection does not hold its thread forever

    def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 - the stdlib's name
        pass   # the access line is written in uvicorn's format by _send

    # -- routing -----------------------------------------------------------------------------------
    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/health":
            self._send(503 if self.server.app.engine.dead else 200, b"", "application/json")
        elif path == "/v1/models":
            self._send_json(200, self._models())
        elif path == "/metrics":
            app = self.server.app
            self._send(200, app.metrics.render(app.engine.snapshot()), CONTENT_TYPE)
        elif path == "/version":
            self._send_json(200, {"version": VERSION})
        else:
            self._send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        if urlsplit(self.path).path == "/v1/completions":
            self._completions()
        else:
            self._send_json(404, {"detail": "Not Found"})

    # -- endpoints ---------------------------------------------------------------------------------
    def _models(self) -> dict[str, Any]:
        app = self.server.app
        return {"object": "list", "data": [{
            "id": app.args.model, "object": "model", "created": app.created, "owned_by": "vllm",
            "root": app.args.model, "parent": None, "max_model_len": app.args.model_len,
            "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                            "created": app.created, "allow_create_engine": False, "allow_sampling": True,
                            "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                            "allow_fine_tuning": False, "organization": "*", "group": None, "is_blocking": False}]}]}

    def _completions(self) -> None:
        app = self.server.app
        body = self._read_json()
        if body is None:
            return
        if body.get("model") not in (None, app.args.model):
            self._error(404, "NotFoundError", f"The model `{body.get('model')}` does not exist.")
            return
        prompt = body.get("prompt", "")
        if isinstance(prompt, list):
            prompt = " ".join(str(p) for p in prompt)
        max_tokens = body.get("max_tokens", DEFAULT_MAX_TOKENS)
        if not isinstance(prompt, str) or not isinstance(max_tokens, int) or max_tokens < 1:
            self._error(400, "BadRequestError", "prompt must be a string and max_tokens a positive integer")
            return
        req = Request.from_prompt(f"cmpl-{uuid.uuid4().hex}", prompt, max_tokens)
        limit = app.args.model_len
        if req.prompt_tokens > limit:
            self._error(400, "BadRequestError", f"This model's maximum context length is {limit} tokens. However, "
                        f"your request has {req.prompt_tokens} input tokens. Please reduce the length of the input.")
            return
        if req.prompt_tokens + max_tokens > limit:
            self._error(400, "BadRequestError", f"'max_tokens' is too large: {max_tokens}. This model's maximum "
                        f"context length is {limit} tokens and your request has {req.prompt_tokens} input tokens "
                        f"({max_tokens} > {limit} - {req.prompt_tokens}).")
            return
        try:
            app.engine.submit(req)
        except EngineDead:
            self._error(500, "InternalServerError", ENGINE_DEAD)
            return
        if not req.done.wait(REQUEST_LIMIT_S):
            app.engine.abandon(req)
            self._error(504, "TimeoutError", "the engine did not finish the request in time")
            return
        if req.error:
            self._error(500, "InternalServerError", ENGINE_DEAD)
            return
        text = " " + " ".join(_WORDS[i % len(_WORDS)] for i in range(req.generated))
        self._send_json(200, {
            "id": req.rid, "object": "text_completion", "created": int(time.time()), "model": app.args.model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None,
                         "prompt_logprobs": None}],
            "usage": {"prompt_tokens": req.prompt_tokens, "total_tokens": req.prompt_tokens + req.generated,
                      "completion_tokens": req.generated, "prompt_tokens_details": None}})

    # -- plumbing ----------------------------------------------------------------------------------
    def _read_json(self) -> dict[str, Any] | None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > MAX_BODY:
            self._error(400, "BadRequestError", "missing or oversized request body")
            return None
        try:
            data = json.loads(self.rfile.read(length) or b"{}")
        except (ValueError, UnicodeDecodeError):
            self._error(400, "BadRequestError", "the request body is not JSON")
            return None
        if not isinstance(data, dict):
            self._error(400, "BadRequestError", "the request body must be a JSON object")
            return None
        return data

    def _error(self, status: int, kind: str, message: str) -> None:
        self._send_json(status, {"error": {"message": message, "type": kind, "param": None, "code": status}})

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        app = self.server.app
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (ConnectionError, TimeoutError):
            pass    # the client gave up (its timeout); uvicorn still logs the response
        app.log.access(app.api, (self.client_address[0], self.client_address[1]), self.requestline, status)
