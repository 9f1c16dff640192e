"""What `triage serve` posts for an alert (`--post URL`), and the posting itself.

The message is JSON (schema `triage.alert/v1`): the alert, the class with its confidence and
summary, the full verdict (`triage.verdict/v1`), what each source gave, the commands to run next,
and a `text` field of a few lines that a chat incoming webhook shows as it is. Recovery is never
run from here: the next commands start with `triage recover INCIDENT`, which only plans unless
a person adds --execute.

A message is kept in INCIDENTS/.triage-serve/outbox/ until the receiver took it (2xx), so a
receiver that is down, or a stop in the middle of a post, loses nothing: what is left there is
sent again at the next start. A kept message is masked value by value before it is serialised
(what is posted is that file) and is the receiver's user's alone (0600).
"""
from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...classes import registry
from .alert_incident import Opened
from .alert_journal import STATE_DIR
from .alert_payload import Alert
from .private import make_private_dir, write_private

SCHEMA = "triage.alert/v1"
OUTBOX = "outbox"
TRIES = 3
BACKOFF_S = (0.5, 2.0)


def next_commands(path: Path) -> list[str]:
    where = shlex.quote(str(path))
    return [f"triage recover {where}", f"triage timeline {where}", f"triage classify {where} --explain",
            f"triage note {where} \"what you did\"", f"triage postmortem {where}"]


def firing_message(opened: Opened) -> dict[str, Any]:
    from ...report import to_json

    v, alert = opened.verdict, opened.alert
    cls, conf = v.oom_class.value, round(float(v.confidence), 2)
    where = _where(alert)
    basis = {"bundle": "the incident's evidence", "prometheus": "the instance's Prometheus series"}[opened.decided_by]
    commands = next_commands(opened.path)
    lines = [f"[{cls}] {alert.name}{' on ' + where if where else ''} (firing since {alert.starts_at}): {v.summary}",
             f"confidence {conf:.2f}, from {basis}; incident bundle {opened.path}",
             f"next: `{commands[0]}` (dry run: a plan, nothing executed), `{commands[1]}`"]
    if cls == registry().fallback.id.value and v.attach:
        lines.append(f"to settle it, attach: {v.attach[0]}")
    return {"schema": SCHEMA, "event": "firing", "text": "\n".join(lines),
            "alert": _alert(alert), "incident": str(opened.path), "incident_id": opened.path.name,
            "class": cls, "confidence": conf, "summary": v.summary, "decided_by": opened.decided_by,
            "series_class": opened.series_class, "runbook": v.runbook, "next": commands,
            "sources": opened.sources, "verdict": to_json(v)}


def resolved_message(alert: Alert, path: Path, note: dict[str, Any]) -> dict[str, Any]:
    where = _where(alert)
    commands = next_commands(path)
    text = (f"[resolved] {alert.name}{' on ' + where if where else ''} resolved at {note['time']}; "
            f"timeline: `{commands[1]}`, postmortem: `{commands[4]}`")
    return {"schema": SCHEMA, "event": "resolved", "text": text, "alert": _alert(alert), "incident": str(path),
            "incident_id": path.name, "resolved_at": note["time"], "next": commands[1:]}


def _alert(alert: Alert) -> dict[str, Any]:
    from ...redact import redact_output

    return redact_output({"name": alert.name, "status": alert.status, "startsAt": alert.starts_at,
                          "fingerprint": alert.fingerprint, "labels": alert.labels})


def _where(alert: Alert) -> str:
    return alert.labels.get("instance") or alert.labels.get("pod") or alert.labels.get("node") or ""


@dataclass
class Poster:
    """Posts messages to one URL through the outbox; `send` never raises."""

    url: str
    incidents: Path
    timeout_s: float = 10.0

    @property
    def outbox(self) -> Path:
        return self.incidents / STATE_DIR / OUTBOX

    def keep(self, name: str, message: dict[str, Any]) -> Path:
        """The message into the outbox (written whole, masked), before it is sent."""
        from ...redact import redact_output

        make_private_dir(self.outbox)
        path = self.outbox / f"{time.time_ns()}-{name}.json"
        write_private(path, json.dumps(redact_output(message), ensure_ascii=False).encode("utf-8"))
        return path

    def left(self) -> list[Path]:
        try:
            return sorted(p for p in self.outbox.iterdir() if p.suffix == ".json" and not p.name.startswith("."))
        except FileNotFoundError:
            return []

    def send(self, path: Path) -> str | None:
        """POST the kept message, retried; removed once taken. None, or why it was not taken."""
        import requests

        try:
            body = path.read_bytes()
        except OSError as exc:
            return f"{path.name}: {exc.strerror or exc}"
        problem = None
        for attempt in range(TRIES):
            if attempt:
                time.sleep(BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)])
            try:
                resp = requests.post(self.url, data=body, headers={"Content-Type": "application/json"},
                                     timeout=(min(5.0, self.timeout_s), self.timeout_s), allow_redirects=False)
            except requests.RequestException as exc:
                problem = f"{exc.__class__.__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
                continue
            if 200 <= resp.status_code < 300:
                try:
                    path.unlink()
                except OSError:
                    pass
                return None
            problem = f"HTTP {resp.status_code}"
            if 400 <= resp.status_code < 500 and resp.status_code not in (408, 429):
                # the receiver refuses this message: sending it again will not help; kept aside for a person
                refused = path.with_suffix(".refused")
                try:
                    path.replace(refused)
                except OSError:
                    pass
                return f"{problem}: refused; kept as {refused}"
        return problem
