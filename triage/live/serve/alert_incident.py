"""One firing alert -> one incident bundle with its verdict; one resolved alert -> the bundle closed.

The bundle (INCIDENTS/<startsAt>-<alertname>-<fingerprint>/) is written as `triage collect`
writes one: in a hidden directory beside it, renamed into place whole. It holds

    alerts/<received>-firing.json   the alert's webhook payload (the group's envelope, this alert)
    logs/                           the server's log, as --logs-from found it
    k8s/pod.json                    with --logs-from kubectl
    metrics/prometheus-<inst>.prom  the instance's series around startsAt (with --prometheus)
    incident.yaml                   `created` is the alert's startsAt (the date year-less log times
                                    are read against); `alert:` its labels, startsAt, fingerprint;
                                    `collected:` what each source gave; `triage:` the verdict

The alert arrives masked (alert_payload.py), and incident.yaml is masked value by value again
before it is written; the alerts/ files are the receiver's user's alone (0600).

The verdict is the bundle's own (what `triage classify INCIDENT` says: log and series readings
together) when that names a class; else the verdict of the instance's series read as the fleet
mode reads them (lifetimes, restarts, memory at its limit); else the bundle's `unknown`, naming
what to attach. A resolved alert adds its payload to alerts/ and a note setting the `resolved`
moment at its endsAt, which `triage timeline` reads as the end of the incident.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ... import __version__
from ...classes import registry
from ...errors import TriageError
from ...timeline.notes import SERVE_AUTHOR
from .alert_payload import Alert, envelope_bytes
from .alert_sources import LogsFrom, gather_logs, gather_series
from .private import PRIVATE, write_private
from ..source import OK, SourceRun
from ..staging import Staging, utc_now

AUTHOR = SERVE_AUTHOR            # the timeline reads its notes as signals, never as a response
DECIDED = registry().settled_ids()       # classes that name what failed (not healthy, not unknown)
UNDECIDED = registry().fallback.id.value
HEALTHY = registry().healthy.id.value
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Settings:
    incidents: Path
    logs_from: LogsFrom | None = None
    prometheus: Any = None                   # a promapi.PromClient (thread-safe), or None
    lookback_s: float = 3600.0
    after_s: float = 600.0
    source_timeout_s: float = 20.0
    log_max_bytes: int = 64 << 20
    step_s: float | None = None              # the series' query step; None follows the window


@dataclass
class Opened:
    path: Path
    alert: Alert
    verdict: Any                             # model.Verdict
    decided_by: str                          # "bundle" | "prometheus"
    series_class: str | None = None          # what the series alone said, when read
    sources: list[dict[str, Any]] = field(default_factory=list)


def incident_name(alert: Alert) -> str:
    stamp = alert.starts.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = _SAFE.sub("-", alert.name).strip("-.")[:48] or "alert"
    return f"{stamp}-{name}-{_SAFE.sub('', alert.fingerprint)[:16] or 'nofp'}"


def open_incident(alert: Alert, settings: Settings) -> Opened:
    """Gather, classify and write the bundle; TriageError when it cannot be written."""
    target = settings.incidents / incident_name(alert)
    existing = _existing(target, alert)
    if existing is not None:                 # written by a run that stopped before recording it
        verdict, _ = _classify(existing)
        return Opened(existing, alert, verdict or _unknown(alert, "the bundle holds no evidence"), "bundle")
    staging = Staging(target)
    try:
        runs = [_alert_file(staging, alert)]
        if settings.logs_from is not None:
            runs += gather_logs(staging, settings.logs_from, alert.labels, settings.source_timeout_s,
                                settings.log_max_bytes)
        series = None
        if settings.prometheus is not None:
            run, series = gather_series(staging, settings.prometheus, alert, settings.lookback_s, settings.after_s,
                                        settings.source_timeout_s, settings.step_s)
            runs.append(run)
        meta = _describe(alert, runs, settings)
        _write_yaml(staging, meta)
        bundle_verdict, problem = _classify(staging.root)
        verdict, decided_by = choose(bundle_verdict, series)
        if verdict is None:
            verdict = _unknown(alert, problem or "no evidence")
        meta["triage"] = {"class": verdict.oom_class.value, "confidence": round(float(verdict.confidence), 2),
                          "summary": verdict.summary, "decided_by": decided_by,
                          **({"series_class": series.oom_class} if series is not None else {}),
                          **({"runbook": verdict.runbook} if verdict.runbook else {})}
        _write_yaml(staging, meta)
        path = staging.finish()
    except BaseException:
        staging.discard()
        raise
    return Opened(path, alert, verdict, decided_by, series.oom_class if series is not None else None,
                  [r.to_json() for r in runs])


def choose(bundle: Any, series: Any) -> tuple[Any, str]:
    """The bundle's verdict when it names a class, else the series' when they name one, else the
    bundle's `no_oom` or `unknown` (the series' when they say healthy and the bundle cannot tell)."""
    if bundle is not None and bundle.oom_class.value in DECIDED:
        return bundle, "bundle"
    if series is not None and series.oom_class in DECIDED:
        return series.verdict, "prometheus"
    if bundle is not None and (series is None or series.oom_class == UNDECIDED or bundle.oom_class.value == HEALTHY):
        return bundle, "bundle"
    return (series.verdict, "prometheus") if series is not None else (None, "bundle")


def close_incident(path: Path, alert: Alert) -> dict[str, Any]:
    """The resolved payload into alerts/, and the `resolved` moment at its endsAt into notes.jsonl."""
    from ...timeline.notes import append_note

    ends = alert.ends or datetime.now(timezone.utc)
    stamp = ends.astimezone(timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")
    write_private(path / "alerts" / f"{stamp}-resolved.json", envelope_bytes(alert), folder_created=True)
    when = _z(ends)
    at = when if ends <= datetime.now(timezone.utc) else None       # a note is never dated in the future
    where = alert.labels.get("instance") or alert.labels.get("pod") or ""
    return append_note(path, f"{AUTHOR}: alert {alert.name}{' on ' + where if where else ''} resolved at {when}",
                       at=at, moment="resolved", author=AUTHOR)


# -- pieces ---------------------------------------------------------------------------------------

def _existing(target: Path, alert: Alert) -> Path | None:
    """The bundle of this alert when a previous run put it in place."""
    from ...bundle import read_incident

    if not (target / "incident.yaml").is_file():
        return None
    try:
        meta, _ = read_incident(target)
    except TriageError:
        return None
    same = isinstance(meta.get("alert"), dict) and meta["alert"].get("key") == alert.key
    if not same:
        raise TriageError(f"{target}: already holds another incident")
    return target


def _alert_file(staging: Staging, alert: Alert) -> SourceRun:
    run = SourceRun("alert", "POST /alertmanager", 10.0, staging)
    stamp = utc_now()[:19].replace(":", "-") + "Z"
    record = run.write(f"alerts/{stamp}-{alert.status}.json", envelope_bytes(alert))
    os.chmod(staging.root / record.path, PRIVATE)
    run.ok(f"{alert.name} {alert.status} since {alert.starts_at}")
    return run


def _describe(alert: Alert, runs: list[SourceRun], settings: Settings) -> dict[str, Any]:
    raw = alert.envelope["alerts"][0]
    annotations = raw.get("annotations") if isinstance(raw.get("annotations"), dict) else {}
    where = alert.labels.get("instance") or alert.labels.get("pod") or alert.labels.get("node")
    summary = annotations.get("summary") or annotations.get("description")
    title = f"{alert.name}{' on ' + where if where else ''}" + (f": {' '.join(str(summary).split())}" if summary else "")
    meta: dict[str, Any] = {"id": incident_name(alert), "title": title[:300]}
    if alert.labels.get("severity"):
        meta["severity"] = alert.labels["severity"]
    if alert.labels.get("service") or alert.labels.get("job"):
        meta["service"] = alert.labels.get("service") or alert.labels.get("job")
    meta["created"] = _z(alert.starts)
    if raw.get("generatorURL"):
        meta["links"] = [raw["generatorURL"]]
    meta["alert"] = {"name": alert.name, "status": "firing", "startsAt": alert.starts_at,
                     "fingerprint": alert.fingerprint, "key": alert.key, "labels": alert.labels,
                     "annotations": annotations, "receiver": alert.envelope.get("receiver")}
    meta["collected"] = {
        "by": f"triage {__version__} serve", "received": utc_now(),
        **({"logs_from": settings.logs_from.describe()} if settings.logs_from else {}),
        **({"prometheus": settings.prometheus.url} if settings.prometheus is not None else {}),
        "sources": {r.name if i == 0 or r.name != runs[i - 1].name else f"{r.name} {i}": _said(r)
                    for i, r in enumerate(runs)},
    }
    return meta


def _said(run: SourceRun) -> str:
    said = run.detail if run.status == OK else run.reason
    return f"{run.status}: {said}" if said else str(run.status)


def _write_yaml(staging: Staging, meta: dict[str, Any]) -> None:
    import yaml

    from ...redact import redact_output

    # masked as values, before YAML lays them out (a wrapped line could cut a secret in two)
    text = "# Written by `triage serve` for an Alertmanager alert.\n" + \
           yaml.safe_dump(redact_output(meta), sort_keys=False, allow_unicode=True, width=100)
    staging.write_meta("incident.yaml", text)


def _classify(root: Path) -> tuple[Any, str | None]:
    from ...api import classify_paths

    try:
        verdict, _ = classify_paths([str(root)])
    except TriageError as exc:
        return None, str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__
    return verdict, None


def _unknown(alert: Alert, why: str) -> Any:
    from ..fleet.fleet import unread

    instance = alert.labels.get("instance") or alert.labels.get("pod") or alert.name
    return unread(instance, alert.labels, why).verdict


def _z(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
