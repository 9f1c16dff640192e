"""One vLLM server over HTTP for `triage watch`: /metrics, /health and /v1/models, each bounded.

http.client on one kept-alive connection per server, not `requests`: at a 1 s interval a new
TCP connection and a Session per request would cost a good part of the 2%-of-a-core budget.
/metrics is read through prometheus-client's parser (the evidence parser's batch helper) after
a cheap filter keeps only the series triage reads, so a scrape full of histogram buckets costs
little; the metric names of every vLLM version map to one concept each (CONCEPTS).
"""
from __future__ import annotations

import http.client
import json
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from ...budget import fraction
from ...evidence.prometheus import CONCEPTS, _parse_lines
from ...units import finite_float, whole
from .readings import Scrape, Source

MAX_BODY_BYTES = 32 << 20          # a /metrics answer larger than this is refused, not held
_WANTED = tuple(name + sep for name in CONCEPTS for sep in ("{", " "))
_SUMMED = {"requests_running": "running", "requests_waiting": "waiting", "preemptions_total": "preemptions_total",
           "prefix_cache_hits_total": "prefix_hits_total", "prefix_cache_queries_total": "prefix_queries_total",
           "request_success_total": "success_total"}


class BadUrl(ValueError):
    pass


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    took_s: float


class Endpoint:
    """A server's base URL and the one connection kept open to it (used by one thread at a time)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadUrl(f"{url!r} is not an http(s) URL with a host (e.g. http://127.0.0.1:8000)")
        try:
            self.port = parts.port
        except ValueError:
            raise BadUrl(f"{url!r} has no valid port") from None
        self.url = url
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.prefix = parts.path.rstrip("/")
        self._conn: http.client.HTTPConnection | None = None

    def get(self, path: str, timeout_s: float) -> Answer:
        """GET prefix+path; raises OSError / http.client.HTTPException (the connection is then
        dropped, and the next call opens a new one)."""
        started = time.monotonic()
        reused = self._conn is not None
        try:
            return self._get(path, timeout_s, started)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            if not reused:
                raise
        # The server closed the kept-alive connection between readings (its idle timeout, a
        # restart): that says nothing about its health, so once more on a new connection.
        return self._get(path, max(0.05, timeout_s - (time.monotonic() - started)), started)

    def _get(self, path: str, timeout_s: float, started: float) -> Answer:
        conn = self._conn
        if conn is None:
            cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
            conn = self._conn = cls(self.host, self.port, timeout=timeout_s)
        elif conn.sock is not None:
            conn.sock.settimeout(timeout_s)
        conn.timeout = timeout_s
        try:
            conn.request("GET", self.prefix + path, headers={"Accept": "text/plain, */*"})
            resp = conn.getresponse()
            body = resp.read(MAX_BODY_BYTES + 1)
            if len(body) > MAX_BODY_BYTES:
                raise http.client.HTTPException(f"answer over {MAX_BODY_BYTES >> 20} MiB")
            if resp.will_close:
                self.close()
        except BaseException:
            self.close()
            raise
        return Answer(resp.status, body, time.monotonic() - started)

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except OSError:
                pass
            self._conn = None


@dataclass(frozen=True)
class ServerFetch:
    metrics: Source
    health: Source
    scrape: Scrape | None
    healthy: bool | None
    max_model_len: int | None


def fetch(endpoint: Endpoint, timeout_s: float, want_models: bool) -> ServerFetch:
    """/metrics, then /health (and /v1/models when asked), each within what is left of `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    scrape: Scrape | None = None
    try:
        answer = endpoint.get("/metrics", _left(deadline))
        if answer.status != 200:
            metrics = Source(False, f"GET /metrics -> {answer.status}", answer.took_s)
        else:
            scrape = parse_metrics(answer.body.decode("utf-8", errors="replace"))
            metrics = Source(True, f"GET /metrics -> 200 in {answer.took_s * 1000:.0f} ms", answer.took_s)
    except ValueError as exc:
        metrics = Source(False, f"GET /metrics: not Prometheus text ({_first_line(exc)})")
    except (OSError, http.client.HTTPException) as exc:
        metrics = Source(False, f"GET /metrics: {describe_error(exc, timeout_s)}")
    healthy: bool | None = None
    try:
        answer = endpoint.get("/health", _left(deadline))
        healthy = answer.status == 200
        health = Source(healthy, f"GET /health -> {answer.status}"
                        + ("" if healthy else ": the front end answers, the engine does not"), answer.took_s)
    except (OSError, http.client.HTTPException) as exc:
        health = Source(False, f"GET /health: {describe_error(exc, timeout_s)}")
    max_len = models_max_len(endpoint, _left(deadline)) if want_models and (metrics.ok or health.ok) else None
    return ServerFetch(metrics, health, scrape, healthy, max_len)


def models_max_len(endpoint: Endpoint, timeout_s: float) -> int | None:
    """max_model_len of the first model /v1/models lists (vLLM says it there), or None."""
    try:
        answer = endpoint.get("/v1/models", timeout_s)
        data = json.loads(answer.body).get("data") if answer.status == 200 else None
        value = data[0].get("max_model_len") if isinstance(data, list) and data and isinstance(data[0], dict) else None
    except (OSError, http.client.HTTPException, ValueError, AttributeError):
        return None
    number = whole(value)
    return number if number is not None and number > 0 else None


def parse_metrics(text: str) -> Scrape:
    """The concepts watch needs from exposition text; ValueError when none of its lines parse."""
    lines = [ln for ln in text.splitlines() if ln.startswith(_WANTED)]
    values: dict[str, Any] = {}
    failed: Exception | None = None
    for parsed in _parse_lines(lines) if lines else []:
        if isinstance(parsed, Exception):
            failed = failed or parsed
            continue
        for name, labels, value, _stamp in parsed:
            _add(values, CONCEPTS[name], labels, value)
    if failed is not None and not values:
        raise ValueError(str(failed))
    return Scrape(**values)


def _add(values: dict[str, Any], concept: str, labels: dict[str, str], value: float) -> None:
    number = finite_float(value)
    if number is None:
        return
    if concept == "kv_cache_usage":           # per engine: the fullest one is the one that fails
        values["kv_cache_usage"] = max(values.get("kv_cache_usage", 0.0), number)
    elif concept in _SUMMED:
        key = _SUMMED[concept]
        values[key] = values.get(key, 0.0) + number
    elif concept == "prefix_cache_hit_rate":
        values["prefix_hit_rate_gauge"] = number
        values.setdefault("prefix_caching", number >= 0)      # V0 reports -1 with caching off
    elif concept == "cache_config" and "gpu_memory_utilization" not in values:
        values["gpu_memory_utilization"] = fraction(labels.get("gpu_memory_utilization"))
        values["num_gpu_blocks"] = _positive(labels.get("num_gpu_blocks"))
        values["block_size"] = _positive(labels.get("block_size"))
        caching = str(labels.get("enable_prefix_caching", "")).strip().lower()
        if caching in ("true", "false"):
            values["prefix_caching"] = caching == "true"


def _positive(text: Any) -> int | None:
    number = whole(text)
    return number if number is not None and number > 0 else None


def describe_error(exc: BaseException, timeout_s: float) -> str:
    """One short line for a failed request: what an on-call engineer needs to read at a glance."""
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"timed out after {timeout_s:.3g} s"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.gaierror):
        return f"host not found ({exc.strerror or exc})"
    if isinstance(exc, http.client.RemoteDisconnected):
        return "the server closed the connection without an answer"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return f"{type(exc).__name__}: {_first_line(exc)}" if str(exc) else type(exc).__name__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else type(exc).__name__


def _left(deadline: float) -> float:
    """What is left of the deadline, at least a sliver: a call past it fails fast, not never."""
    return max(0.05, deadline - time.monotonic())
