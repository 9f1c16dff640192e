"""Talking to a running vLLM server: /health, a real 1-token completion, and /metrics.

A /health 200 only says the HTTP front end is up; vLLM's engine can be dead or wedged behind it.
`serves()` therefore sends a real completion with max_tokens=1 and a deadline. `/metrics` is read
with the evidence parser's `concept_samples`, which maps the metric names of every vLLM version to
one concept each. Every request is bounded (httpget): a deadline for the whole exchange, a cap on
the body.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..httpget import Failure, Reply, get, post_json

# Recovery's steps say a failed request in these words ("GET /health: connection refused after
# 60 tries"); any other failure is said as httpget words it.
_SHORT_WORDS = ("connection refused", "timed out", "name or service not known")


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str             # one line: status code, error, or the answer's length
    status: int | None = None


def health(url: str, timeout_s: float) -> Probe:
    reply = get(url.rstrip("/") + "/health", max(0.1, timeout_s), follow_redirects=True)
    if reply.status is None:
        return Probe(False, f"GET /health: {_said(reply)}")
    return Probe(reply.status == 200, f"GET /health -> {reply.status}", reply.status)


def served_model(url: str, timeout_s: float) -> str | None:
    """The first model id /v1/models lists (the name the server answers to)."""
    reply = get(url.rstrip("/") + "/v1/models", max(0.1, timeout_s), follow_redirects=True)
    if reply.status != 200 or reply.failure is not None:
        return None
    try:
        data = json.loads(reply.body).get("data") or []
        return str(data[0]["id"]) if data else None
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None


def serves(url: str, model: str | None, timeout_s: float) -> Probe:
    """POST /v1/completions with max_tokens=1: the engine proves it can run a step."""
    name = served_model(url, min(timeout_s, 5.0)) or model
    if not name:
        return Probe(False, "no model name: /v1/models did not answer and the evidence names none")
    body = {"model": name, "prompt": "Health check: reply with one token.", "max_tokens": 1, "temperature": 0}
    reply = post_json(url.rstrip("/") + "/v1/completions", body, max(0.1, timeout_s))
    if reply.status is None:
        return Probe(False, f"POST /v1/completions: {_said(reply)}")
    if reply.status != 200:
        text = reply.body.decode("utf-8", errors="replace")
        return Probe(False, f"POST /v1/completions -> {reply.status}: {text[:200]!r}", reply.status)
    if reply.failure is not None:
        return Probe(False, f"POST /v1/completions: {_said(reply)}", 200)
    try:
        choice = json.loads(reply.body)["choices"][0]
        text = choice.get("text", "")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return Probe(False, "POST /v1/completions -> 200 without a completion in the body", 200)
    return Probe(True, f"POST /v1/completions -> 200, 1 token ({text!r})", 200)


def metrics(url: str, timeout_s: float) -> dict[str, float] | Probe:
    """Concept -> value summed over label sets (e.g. requests_running, kv_cache_usage), or a failed Probe."""
    from ..evidence.prometheus import concept_samples

    reply = get(url.rstrip("/") + "/metrics", max(0.1, timeout_s), follow_redirects=True)
    if reply.status is None:
        return Probe(False, f"GET /metrics: {_said(reply)}")
    if reply.status != 200:
        return Probe(False, f"GET /metrics -> {reply.status}", reply.status)
    if reply.failure is not None:
        return Probe(False, f"GET /metrics: {_said(reply)}", 200)
    found = concept_samples(reply.body.decode("utf-8", errors="replace"), every_line=True)
    if found.error is not None:
        return Probe(False, f"GET /metrics: not Prometheus text ({found.error})")
    values: dict[str, float] = {}
    for sample in found.samples:
        # usage gauges are per engine: the worst one counts; counts add up
        if sample.concept.endswith("usage"):
            values[sample.concept] = max(values.get(sample.concept, 0.0), float(sample.value))
        else:
            values[sample.concept] = values.get(sample.concept, 0.0) + float(sample.value)
    return values


def _said(reply: Reply) -> str:
    """A failed request in recovery's short words when they fit, else as httpget says it."""
    if reply.failure is Failure.TIMEOUT:
        return "timed out"
    problem = str(reply.problem)
    return next((words for words in _SHORT_WORDS if words in problem.lower()), problem)
