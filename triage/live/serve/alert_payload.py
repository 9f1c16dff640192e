"""An Alertmanager webhook payload (version "4"), checked whole before anything acts on it.

`triage serve` answers a payload it cannot use with 400 and the reason, and touches nothing:
so every alert of the group is checked here (status, labels, `startsAt`, `fingerprint`) before
the first one is queued. What is kept of each alert is the group's envelope around that alert
alone: the bundle's alerts/ file is then a valid webhook payload of the incident's own alert,
which `triage classify` and `triage timeline` read like any other.

Secrets an alert carries (a token label, a password in a description, a signed generatorURL)
are masked as the payload is read, before anything is checked or kept: the journal, the bundle
and the posted verdict only ever see the masked alert.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Mapping

from ...timeref import parse_iso

VERSION = "4"
STATUSES = ("firing", "resolved")
MAX_ALERTS = 1000           # Alertmanager truncates a group to max_alerts; more than this is no group
# Group-level fields copied into each alert's own envelope (what the timeline and a person read).
_ENVELOPE = ("receiver", "status", "groupLabels", "commonLabels", "commonAnnotations", "externalURL", "version",
             "groupKey", "truncatedAlerts")


class PayloadError(ValueError):
    """The payload cannot be used; the message is the reason the client gets with its 400."""


@dataclass(frozen=True)
class Alert:
    status: str                     # "firing" | "resolved"
    labels: dict[str, str]
    fingerprint: str
    starts_at: str                  # as Alertmanager wrote it (part of the identity)
    starts: datetime                # UTC
    ends: datetime | None           # None for the zero time a firing alert carries
    envelope: dict[str, Any]        # the group's payload with this alert alone in `alerts`

    @property
    def key(self) -> str:
        """One incident per alert occurrence: the same alert firing again later is a new one."""
        return f"{self.fingerprint}@{self.starts_at}"

    @property
    def name(self) -> str:
        return self.labels.get("alertname") or "alert"


@dataclass(frozen=True)
class Payload:
    receiver: str
    status: str
    alerts: list[Alert]


def parse_payload(body: bytes) -> Payload:
    """The payload's alerts; PayloadError saying what is wrong (the first problem found)."""
    from ...safejson import loads

    try:
        doc = loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise PayloadError("the body is not UTF-8 text") from None
    except ValueError as exc:          # JSONDecodeError and too-deep documents alike
        raise PayloadError(f"the body is not JSON: {str(exc)[:200]}") from None
    doc = _masked(doc)
    if not isinstance(doc, dict):
        raise PayloadError("the payload is not a JSON object")
    version = doc.get("version")
    if version != VERSION:
        raise PayloadError(f"version {version!r}: this receiver reads Alertmanager webhook payloads of version "
                           f"{VERSION!r}")
    status = _one_of(doc.get("status"), "status")
    receiver = doc.get("receiver")
    if not isinstance(receiver, str):
        raise PayloadError("'receiver' is missing or not a string")
    alerts = doc.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError("'alerts' is missing or not a list")
    if len(alerts) > MAX_ALERTS:
        raise PayloadError(f"{len(alerts)} alerts in one payload; at most {MAX_ALERTS} are read")
    envelope = {k: doc[k] for k in _ENVELOPE if k in doc}
    return Payload(receiver, status, [_alert(a, i, envelope) for i, a in enumerate(alerts)])


def _alert(raw: Any, i: int, envelope: Mapping[str, Any]) -> Alert:
    where = f"alerts[{i}]"
    if not isinstance(raw, dict):
        raise PayloadError(f"{where} is not an object")
    status = _one_of(raw.get("status"), f"{where}.status")
    labels = raw.get("labels")
    if not isinstance(labels, dict) or not labels:
        raise PayloadError(f"{where}.labels is missing or empty")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise PayloadError(f"{where}.labels: every label name and value must be a string")
    fingerprint = raw.get("fingerprint")
    if not isinstance(fingerprint, str) or not fingerprint.strip() or len(fingerprint) > 128:
        raise PayloadError(f"{where}.fingerprint is missing or not a short string")
    starts_at = raw.get("startsAt")
    starts = parse_iso(starts_at) if isinstance(starts_at, str) else None
    if starts is None:
        raise PayloadError(f"{where}.startsAt is missing or not an RFC 3339 time: {str(starts_at)[:60]!r}")
    ends_at = raw.get("endsAt")
    if ends_at is not None and not isinstance(ends_at, str):
        raise PayloadError(f"{where}.endsAt is not a string")
    ends = parse_iso(ends_at) if ends_at else None
    if ends_at and ends is None and not ends_at.startswith("0001-01-01"):
        raise PayloadError(f"{where}.endsAt is not an RFC 3339 time: {ends_at[:60]!r}")
    if ends is not None and ends.year <= 1:
        ends = None
    if status == "resolved" and ends is None:
        raise PayloadError(f"{where} is resolved but has no endsAt")
    for name in ("annotations",):
        if name in raw and not isinstance(raw[name], dict):
            raise PayloadError(f"{where}.{name} is not an object")
    own = {**envelope, "status": status, "alerts": [raw]}
    return Alert(status, dict(labels), fingerprint.strip(), starts_at, starts, ends, own)


def _masked(doc: Any) -> Any:
    """The payload with every value (and key) masked as output is. The alert's key
    (fingerprint@startsAt) is read from the masked payload too: a re-sent alert gets the same one."""
    from ...redact import redact_output

    return redact_output(doc)


def _one_of(value: Any, where: str) -> str:
    if value not in STATUSES:
        raise PayloadError(f"{where} is {value!r}, not one of {', '.join(STATUSES)}")
    return value


def envelope_bytes(alert: Alert) -> bytes:
    """The alert's envelope as the bundle keeps it: masked value by value, then serialised."""
    return (json.dumps(_masked(alert.envelope), indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def from_envelope(envelope: Mapping[str, Any]) -> Alert:
    """An alert back from its envelope (as the journal keeps it)."""
    body = json.dumps({**envelope, "version": VERSION, "receiver": envelope.get("receiver", "")}).encode()
    return parse_payload(body).alerts[0]
