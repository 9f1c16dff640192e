"""One vLLM server over HTTP for `triage watch`: /metrics, /health and /v1/models, each bounded.

One connection is kept alive per server (httpget.Endpoint), not a `requests` call per reading: at a
1 s interval that would cost a good part of the 2%-of-a-core budget. /metrics is read through
the evidence parser's `concept_samples`, which parses only the series triage reads, so a scrape
full of histogram buckets costs little; the metric names of every vLLM version map to one
concept each (CONCEPTS).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from ...budget import fraction
from ...evidence.prometheus import concept_samples
from ...httpget import BadUrl, Endpoint, Failure, Reply, first_line
from ...units import finite_float, whole
from .readings import Scrape, Source

__all__ = ["BadUrl", "Endpoint", "ServerFetch", "fetch", "models_max_len", "parse_metrics"]

MAX_BODY_BYTES = 32 << 20          # a /metrics answer larger than this is refused, not held
_SUMMED = {"requests_running": "running", "requests_waiting": "waiting", "preemptions_total": "preemptions_total",
           "prefix_cache_hits_total": "prefix_hits_total", "prefix_cache_queries_total": "prefix_queries_total",
           "request_success_total": "success_total"}


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
    reply = endpoint.get("/metrics", _left(deadline), MAX_BODY_BYTES)
    if reply.failure is not None:
        metrics = Source(False, f"GET /metrics: {_failed(reply, timeout_s)}")
    elif reply.status != 200:
        metrics = Source(False, f"GET /metrics -> {reply.status}", reply.took_s)
    else:
        try:
            scrape = parse_metrics(reply.body.decode("utf-8", errors="replace"))
            metrics = Source(True, f"GET /metrics -> 200 in {(reply.took_s or 0.0) * 1000:.0f} ms", reply.took_s)
        except ValueError as exc:
            metrics = Source(False, f"GET /metrics: not Prometheus text ({first_line(exc, 160) or type(exc).__name__})")
    healthy: bool | None = None
    reply = endpoint.get("/health", _left(deadline), MAX_BODY_BYTES)
    if reply.failure is not None:
        health = Source(False, f"GET /health: {_failed(reply, timeout_s)}")
    else:
        healthy = reply.status == 200
        health = Source(healthy, f"GET /health -> {reply.status}"
                        + ("" if healthy else ": the front end answers, the engine does not"), reply.took_s)
    max_len = models_max_len(endpoint, _left(deadline)) if want_models and (metrics.ok or health.ok) else None
    return ServerFetch(metrics, health, scrape, healthy, max_len)


def models_max_len(endpoint: Endpoint, timeout_s: float) -> int | None:
    """max_model_len of the first model /v1/models lists (vLLM says it there), or None."""
    reply = endpoint.get("/v1/models", timeout_s, MAX_BODY_BYTES)
    if reply.failure is not None or reply.status != 200:
        return None
    try:
        data = json.loads(reply.body).get("data")
        value = data[0].get("max_model_len") if isinstance(data, list) and data and isinstance(data[0], dict) else None
    except (ValueError, AttributeError):
        return None
    number = whole(value)
    return number if number is not None and number > 0 else None


def parse_metrics(text: str) -> Scrape:
    """The concepts watch needs from exposition text; ValueError when none of its lines parse."""
    found = concept_samples(text)
    values: dict[str, Any] = {}
    for sample in found.samples:
        _add(values, sample.concept, sample.labels, sample.value)
    if found.error is not None and not values:
        raise ValueError(str(found.error))
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


def _failed(reply: Reply, timeout_s: float) -> str:
    """Why a request got no usable answer, at a glance: a timeout is said against the whole
    reading's budget, which is what the user set."""
    return f"timed out after {timeout_s:.3g} s" if reply.failure is Failure.TIMEOUT else str(reply.problem)


def _left(deadline: float) -> float:
    """What is left of the deadline, at least a sliver: a call past it fails fast, not never."""
    return max(0.05, deadline - time.monotonic())
