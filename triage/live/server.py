"""Talking to a running vLLM server: /health, a real 1-token completion, and /metrics.

A /health 200 only says the HTTP front end is up; vLLM's engine can be dead or wedged behind it.
`serves()` therefore sends a real completion with max_tokens=1 and a deadline. `/metrics` is read
with prometheus-client's own parser, and the metric names of every vLLM version are mapped to one
concept each (the table lives with the evidence parser).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    ok: bool
    detail: str             # one line: status code, error, or the answer's length
    status: int | None = None


def health(url: str, timeout_s: float) -> Probe:
    import requests

    try:
        resp = requests.get(url.rstrip("/") + "/health", timeout=max(0.1, timeout_s))
    except requests.RequestException as exc:
        return Probe(False, f"GET /health: {_error(exc)}")
    return Probe(resp.status_code == 200, f"GET /health -> {resp.status_code}", resp.status_code)


def served_model(url: str, timeout_s: float) -> str | None:
    """The first model id /v1/models lists (the name the server answers to)."""
    import requests

    try:
        resp = requests.get(url.rstrip("/") + "/v1/models", timeout=max(0.1, timeout_s))
        data = resp.json().get("data") or []
        return str(data[0]["id"]) if resp.status_code == 200 and data else None
    except (requests.RequestException, ValueError, KeyError, TypeError, AttributeError, IndexError):
        return None


def serves(url: str, model: str | None, timeout_s: float) -> Probe:
    """POST /v1/completions with max_tokens=1: the engine proves it can run a step."""
    import requests

    name = served_model(url, min(timeout_s, 5.0)) or model
    if not name:
        return Probe(False, "no model name: /v1/models did not answer and the evidence names none")
    body = {"model": name, "prompt": "Health check: reply with one token.", "max_tokens": 1, "temperature": 0}
    try:
        resp = requests.post(url.rstrip("/") + "/v1/completions", json=body, timeout=max(0.1, timeout_s))
    except requests.RequestException as exc:
        return Probe(False, f"POST /v1/completions: {_error(exc)}")
    if resp.status_code != 200:
        return Probe(False, f"POST /v1/completions -> {resp.status_code}: {resp.text[:200]!r}", resp.status_code)
    try:
        choice = resp.json()["choices"][0]
        text = choice.get("text", "")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return Probe(False, "POST /v1/completions -> 200 without a completion in the body", 200)
    return Probe(True, f"POST /v1/completions -> 200, 1 token ({text!r})", 200)


def metrics(url: str, timeout_s: float) -> dict[str, float] | Probe:
    """Concept -> value summed over label sets (e.g. requests_running, kv_cache_usage), or a failed Probe."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    from ..evidence.prometheus import CONCEPTS

    try:
        resp = requests.get(url.rstrip("/") + "/metrics", timeout=max(0.1, timeout_s))
    except requests.RequestException as exc:
        return Probe(False, f"GET /metrics: {_error(exc)}")
    if resp.status_code != 200:
        return Probe(False, f"GET /metrics -> {resp.status_code}", resp.status_code)
    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(resp.text):
            for sample in family.samples:
                concept = CONCEPTS.get(sample.name)
                if concept:
                    # usage gauges are per engine: the worst one counts; counts add up
                    if concept.endswith("usage"):
                        values[concept] = max(values.get(concept, 0.0), float(sample.value))
                    else:
                        values[concept] = values.get(concept, 0.0) + float(sample.value)
    except ValueError as exc:
        return Probe(False, f"GET /metrics: not Prometheus text ({exc})")
    return values


def _error(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Connection refused", "timed out", "Name or service not known", "Read timed out"):
        if marker in text:
            return marker.lower()
    return type(exc).__name__ + (f": {text[:120]}" if text else "")
