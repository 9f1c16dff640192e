"""Key moments (impact start, detected, first response, mitigated, resolved) and the durations
between them, each citing the evidence it came from; hand-set moments keep the computed value.

- impact start: the first failure (GPU OOM, engine death, OOM kill, GPU fault, ...) or the start
  of an alert on errors / availability, whichever is earlier;
- detected: the first page (a firing Alertmanager payload, dated by its file name; the alert's
  own start when the payload time is unknown, or later than Alertmanager ever waits to notify);
- first response: the first note or recovery step at or after impact start;
- mitigated: the first deep health check that passed after the last failure, or the moment
  every error / availability alert had resolved, whichever is earlier;
- resolved: the moment the last alert resolved (with no alerts: the mitigation time).
Overrides come from incident.yaml `moments:` (wins) or a note carrying a moment.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from ..timeref import parse_iso
from .from_evidence import AlertState
from .incident import IncidentInfo
from .model import DURATION_LABELS, DURATIONS, MOMENT_NAMES, Event, Moment
from .notes import Note

_FAILURE_WORDS = {
    "gpu_oom": "GPU OOM", "engine_dead": "engine death", "engine_start_failed": "engine start failure",
    "process_died": "server process death", "host_oom_kill": "host OOM kill", "gpu_fault": "GPU fault",
    "cuda_error": "CUDA error", "nccl_error": "NCCL error", "request_failed": "failed request",
}
# At equal times, the OOM itself explains the impact better than its consequences.
_FAILURE_RANK = {"gpu_oom": 0, "host_oom_kill": 1, "gpu_fault": 1, "engine_dead": 2}


@dataclass
class MomentsResult:
    moments: dict[str, Moment]
    durations: dict[str, timedelta | None]
    problems: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def compute(events: list[Event], alerts: dict[str, AlertState], notes: list[Note], info: IncidentInfo,
            *, has_alert_files: bool, alerts_dir: bool = False) -> MomentsResult:
    res = MomentsResult({}, {})
    impact = _impact_start(events, alerts)
    detected = _detected(alerts)
    response = _first_response(events, impact)
    mitigated = _mitigated(events, alerts)
    resolved = _resolved(alerts, mitigated)
    computed = {"impact_start": impact, "detected": detected, "first_response": response,
                "mitigated": mitigated, "resolved": resolved}
    why_missing = {
        "impact_start": "no failure in the evidence and no error-rate alert — impact start unknown",
        "detected": ("no firing alert in alerts/ — detection time unknown" if has_alert_files
                     else "alerts/ holds no Alertmanager payload — detection time unknown" if alerts_dir
                     else "no alerts/ — detection time unknown"),
        "first_response": "no note or recovery step after impact start — first response unknown",
        "mitigated": "no passing deep health check after the last failure and no error-rate alert resolved "
                     "— mitigation time unknown",
        "resolved": _unresolved(alerts),
    }
    overrides = _overrides(info, notes, res.problems)
    for name in MOMENT_NAMES:
        moment = computed[name] or Moment(name, None, None, "not found in the evidence")
        if name in overrides:
            hand = overrides[name]
            moment = Moment(name, hand.time, hand.source, hand.how, computed=moment)
        elif moment.time is None:
            res.missing.append(why_missing[name])
        res.moments[name] = moment
    for key, (start, end) in DURATIONS.items():
        a, b = res.moments[start].time, res.moments[end].time
        res.durations[key] = (b - a) if a is not None and b is not None else None
        if a is not None and b is not None and b < a:
            res.problems.append(f"{end} ({_z(b)}) is before {start} ({_z(a)}): {DURATION_LABELS[key]} "
                                f"would be negative")
    m, r = res.moments["mitigated"].time, res.moments["resolved"].time
    if m is not None and r is not None and r < m:
        res.problems.append(f"resolved ({_z(r)}) is before mitigated ({_z(m)})")
    return res


def _impact_start(events: list[Event], alerts: dict[str, AlertState]) -> Moment | None:
    failures = [e for e in events if e.category == "failure"]
    best = min(failures, key=lambda e: (e.time, _FAILURE_RANK.get(e.kind, 5)), default=None)
    moment = None
    if best is not None:
        file = best.sources[0].rsplit(":", 1)[0]
        on = f" ({best.node})" if best.node else ""
        moment = Moment("impact_start", best.time, best.sources[0],
                        f"first {_FAILURE_WORDS.get(best.kind, best.kind.replace('_', ' '))} in {file}{on}")
    for a in alerts.values():
        if a.impact and a.starts is not None and (moment is None or a.starts < moment.time):
            moment = Moment("impact_start", a.starts, a.fired_at or a.resolved_at,
                            f"alert {a.name} (errors / availability) started firing")
    return moment


def _detected(alerts: dict[str, AlertState]) -> Moment | None:
    paged = [a for a in alerts.values() if a.page is not None]
    if paged:
        a = min(paged, key=lambda a: a.page)
        if a.paged_from:
            how = f"first page: alert {a.name} delivered (payload {a.paged_from}; firing since {_hms(a.starts)})"
        elif a.late_payload:
            how = (f"alert {a.name} started firing; its payload {a.late_payload} arrived later than Alertmanager "
                   "waits before a first notification (a repeat or a back-dated alert), so the alert's start is "
                   "taken as detection")
        else:
            how = f"first alert: {a.name} started firing"
        return Moment("detected", a.page, a.fired_at, how)
    started = [a for a in alerts.values() if a.starts is not None]
    if started:
        a = min(started, key=lambda a: a.starts)
        return Moment("detected", a.starts, a.resolved_at,
                      f"first alert: {a.name} started firing (only its resolved payload is in the bundle)")
    return None


def _first_response(events: list[Event], impact: Moment | None) -> Moment | None:
    since = impact.time if impact is not None else None
    for e in events:
        if e.category in ("note", "response") or e.kind == "health_check_passed":
            if e.sources and e.sources[0].startswith(("notes.jsonl", "actions.jsonl")) and (since is None or e.time >= since):
                what = "note" if e.kind == "note" else "recovery step"
                return Moment("first_response", e.time, e.sources[0], f"first {what}: {_quote(e.text)}")
    return None


def _mitigated(events: list[Event], alerts: dict[str, AlertState]) -> Moment | None:
    candidates: list[Moment] = []
    last_failure = max((e.until or e.time for e in events if e.category == "failure"), default=None)
    for e in events:
        if e.kind == "health_check_passed":
            passed = e.until or e.time
            if last_failure is None or passed > last_failure:
                candidates.append(Moment("mitigated", passed, e.sources[-1],
                                         f"first deep health check passed after the last failure: {_quote(e.text)}"))
                break
    impact = [a for a in alerts.values() if a.impact and a.starts is not None]
    if impact and all(a.ends is not None for a in impact):
        a = max(impact, key=lambda a: a.ends)
        candidates.append(Moment("mitigated", a.ends, a.resolved_at,
                                 f"error rate back to normal: alert {a.name} resolved"))
    return min(candidates, key=lambda m: m.time, default=None)


def _resolved(alerts: dict[str, AlertState], mitigated: Moment | None) -> Moment | None:
    fired = [a for a in alerts.values() if a.starts is not None]
    if fired:
        if any(a.ends is None for a in fired):
            return None
        a = max(fired, key=lambda a: a.ends)
        return Moment("resolved", a.ends, a.resolved_at, f"every alert resolved; the last: {a.name}")
    if mitigated is not None:
        return Moment("resolved", mitigated.time, mitigated.source,
                      f"no alerts to resolve: taken as the mitigation time ({mitigated.how})")
    return None


def _unresolved(alerts: dict[str, AlertState]) -> str:
    open_ = sorted({a.name for a in alerts.values() if a.starts is not None and a.ends is None})
    if open_:
        return f"alert {', '.join(open_)} still firing in the bundle (no resolved payload) — resolution time unknown"
    return "no alerts and no mitigation — resolution time unknown"


@dataclass
class _Hand:
    time: datetime
    source: str
    how: str


def _overrides(info: IncidentInfo, notes: list[Note], problems: list[str]) -> dict[str, _Hand]:
    out: dict[str, _Hand] = {}
    for note in notes:                      # the last note wins among notes
        if note.moment:
            # Our own tools write notes too (`triage serve` closing an incident): not by hand.
            by = f"set by {note.author}" if note.automated else "set by hand"
            out[note.moment] = _Hand(note.time, note.source, f"{by} in {note.source}: {_quote(note.text)}")
    for name, value in info.moments.items():   # incident.yaml wins over notes
        where = f"incident.yaml moments.{name}"
        if name not in MOMENT_NAMES:
            problems.append(f"{where}: unknown moment (one of {', '.join(MOMENT_NAMES)})")
            continue
        when = _yaml_time(value, info)
        if when is None:
            problems.append(f"{where}: {value!r} is not a time (use 2026-03-12T14:18:42Z)")
            continue
        out[name] = _Hand(when, "incident.yaml", f"set by hand in {where}")
    return out


def _yaml_time(value: Any, info: IncidentInfo) -> datetime | None:
    if isinstance(value, datetime):          # YAML reads an unquoted timestamp as a datetime
        return (value if value.tzinfo else value.replace(tzinfo=info.tz)).astimezone(timezone.utc)
    if not isinstance(value, str):
        return None
    text = value.strip()
    has_zone = text.endswith(("Z", "z")) or (len(text) > 19 and text[19:].lstrip(".0123456789")[:1] in ("+", "-"))
    when = parse_iso(text)
    if when is None:
        return None
    if not has_zone:   # a zone-less time is in the incident's zone
        when = when.replace(tzinfo=None).replace(tzinfo=info.tz).astimezone(timezone.utc)
    return when


def _quote(text: str, limit: int = 80) -> str:
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return f"“{text}”"


def _hms(moment: datetime | None) -> str:
    return moment.strftime("%H:%M:%S") if moment else "?"


def _z(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
