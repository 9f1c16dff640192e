"""Alertmanager alerts: webhook payloads (version "4", formats.md 6.1) and `/api/v2/alerts` lists.

A file may hold one payload or a JSON array of them (a receiver that appends what it gets).
Each alert becomes one ALERT record timed at its start (firing) or its end (resolved). The zero
time `0001-01-01T00:00:00Z`, which firing alerts carry in `endsAt`, reads as None.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Iterator, Mapping

from ..errors import BadInput
from ..model import Evidence
from ..timeref import parse_iso
from .base import InputFile, ParseContext, json_head, looks_binary
from .kinds import Kind

NAME = "alertmanager"

_WEBHOOK_RE = re.compile(rb'"(?:groupKey|receiver|truncatedAlerts|commonLabels)"\s*:')
_ALERTS_RE = re.compile(rb'"alerts"\s*:\s*\[')
_V2_KEYS = (rb'"fingerprint"', rb'"startsAt"', rb'"receivers"')
# Labels that say where an alert fired, in the order worth showing.
_WHERE_LABELS = ("instance", "node", "hostname", "Hostname", "namespace", "pod", "container", "gpu",
                 "model_name")
_MAX_WHERE = 3


# ---------------------------------------------------------------------------------- sniff


def sniff(head: bytes, name: str) -> int:
    if not head or looks_binary(head) or not json_head(head):
        return 0
    if _ALERTS_RE.search(head) and _WEBHOOK_RE.search(head):
        return 90
    if json_head(head) == "[" and all(k in head for k in _V2_KEYS):
        return 70
    return 0


# ---------------------------------------------------------------------------------- parse


def parse(src: InputFile, ctx: ParseContext) -> Iterator[Evidence]:
    doc = src.read_json()
    alerts = list(_alerts(doc))
    if not alerts:
        if _has_payload(doc):
            return  # a payload with an empty alert list is valid, if odd
        raise BadInput(src.display, "JSON is neither an Alertmanager webhook payload nor an alert list")
    lines = src.key_lines(b'"startsAt"', len(alerts))
    for (alert, payload), line in zip(alerts, lines):
        yield _alert_evidence(src, ctx, line, alert, payload)


def _has_payload(doc: Any) -> bool:
    items = doc if isinstance(doc, list) else [doc]
    return any(isinstance(p, dict) and isinstance(p.get("alerts"), list) for p in items)


def _alerts(doc: Any) -> Iterator[tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """(alert, the payload it came in) for every alert; API v2 alerts have an empty payload."""
    items = doc if isinstance(doc, list) else [doc]
    for item in items:
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("alerts"), list):
            for alert in item["alerts"]:
                if isinstance(alert, dict):
                    yield alert, item
        elif isinstance(item.get("labels"), dict) and "startsAt" in item:
            yield item, {}




def _alert_evidence(src: InputFile, ctx: ParseContext, line: int | None, alert: Mapping[str, Any],
                    payload: Mapping[str, Any]) -> Evidence:
    labels = _str_dict(alert.get("labels"))
    annotations = _str_dict(alert.get("annotations"))
    status, state = _status(alert, payload)
    starts_at = _stamp(alert.get("startsAt"))
    ends_at = _stamp(alert.get("endsAt"))
    fields: dict[str, Any] = {
        "alertname": labels.get("alertname"),
        "status": status,
        "state": state,
        "severity": labels.get("severity"),
        "starts_at": starts_at,
        "ends_at": ends_at,
        "labels": labels,
        "annotations": annotations,
        "fingerprint": alert.get("fingerprint"),
        "receiver": payload.get("receiver") or _v2_receiver(alert),
        "group_key": payload.get("groupKey"),
        "generator_url": alert.get("generatorURL") or None,
    }
    time = _when(status, starts_at, ends_at)
    return ctx.evidence(src, line, Kind.ALERT, render(fields), time=time, **fields)


def _status(alert: Mapping[str, Any], payload: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """("firing"|"resolved", API v2 state). API v2 lists only active alerts: those are firing."""
    raw = alert.get("status")
    if isinstance(raw, dict):
        return "firing", raw.get("state")
    status = raw if isinstance(raw, str) and raw else payload.get("status")
    return (status if isinstance(status, str) else None), None


def _v2_receiver(alert: Mapping[str, Any]) -> str | None:
    receivers = alert.get("receivers")
    if isinstance(receivers, list) and receivers and isinstance(receivers[0], dict):
        return receivers[0].get("name")
    return None


def _stamp(value: Any) -> str | None:
    """The time as written, or None for an absent or zero time."""
    if not isinstance(value, str) or parse_iso(value) is None:
        return None
    return value


def _when(status: str | None, starts_at: str | None, ends_at: str | None) -> datetime | None:
    if status == "resolved" and ends_at:
        return parse_iso(ends_at)
    return parse_iso(starts_at) if starts_at else None


def _str_dict(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        return {}
    return {str(k): str(v) for k, v in value.items()}


def render(fields: Mapping[str, Any]) -> str:
    """`ALERT VLLMKVCacheHigh firing (severity=critical) instance=gpu-node-07: <summary>`"""
    text = f"ALERT {fields.get('alertname') or '?'} {fields.get('status') or '?'}"
    if fields.get("severity"):
        text += f" (severity={fields['severity']})"
    labels = fields.get("labels") or {}
    where = [f"{k}={labels[k]}" for k in _WHERE_LABELS if labels.get(k)][:_MAX_WHERE]
    if where:
        text += " " + " ".join(where)
    annotations = fields.get("annotations") or {}
    summary = annotations.get("summary") or annotations.get("description") or annotations.get("message")
    if summary:
        text += f": {' '.join(summary.split())}"
    return text
