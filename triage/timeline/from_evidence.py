"""Evidence records (logs, /metrics, nvidia-smi, dmesg, kubectl, Alertmanager) -> raw timeline events.

Failures and lifecycle lines map one to one. Readings (stats lines, scrapes, nvidia-smi) become
events only where they cross a threshold: a timeline shows when KV usage went over 90%, not
every stats line. Lines without a time of their own (a traceback's last line, uvicorn's
"Application startup complete.") take the time of the line before them in the same file.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Iterator

from ..budget import engine_budget as _engine_budget
from ..evidence.kinds import GPU_OOM_KINDS, Kind
from ..model import Evidence, EvidenceSet
from ..thresholds import DISCREPANCY, KV_CRITICAL, KV_HIGH, WAITING_HIGH
from ..timeref import parse_iso
from .raw import Raw, node_from_file, where

GPU_FULL = 0.98           # nvidia-smi used/total with no engine budget to compare to
RELEASED = 0.05           # a GPU that was busy and reads below this: its process is gone
REARM = 0.05              # hysteresis: a threshold fires again only after falling this far below it

# evidence kind -> (timeline kind, category). Lifecycle kinds get their category later.
_DIRECT: dict[str, tuple[str, str]] = {
    **{k.value: ("gpu_oom", "failure") for k in GPU_OOM_KINDS},
    Kind.ENGINE_DEAD.value: ("engine_dead", "failure"),
    Kind.ENGINE_START_FAILED.value: ("engine_start_failed", "failure"),
    Kind.PROCESS_DIED.value: ("process_died", "failure"),
    Kind.CHILD_KILLED.value: ("process_died", "failure"),
    Kind.WORKER_VANISHED.value: ("process_died", "failure"),
    Kind.TERMINATED.value: ("process_died", "failure"),
    Kind.REQUEST_FAILED.value: ("request_failed", "failure"),
    Kind.HOST_OOM_KILL.value: ("host_oom_kill", "failure"),
    Kind.OOM_KILLED.value: ("host_oom_kill", "failure"),
    Kind.XID.value: ("gpu_fault", "failure"),
    Kind.ECC_ERROR.value: ("gpu_fault", "failure"),
    Kind.GPU_LOST.value: ("gpu_fault", "failure"),
    Kind.ILLEGAL_MEMORY_ACCESS.value: ("cuda_error", "failure"),
    Kind.CUDA_ERROR.value: ("cuda_error", "failure"),
    Kind.NCCL_ERROR.value: ("nccl_error", "failure"),
    Kind.HOST_MEMORY_EXHAUSTED.value: ("host_memory_exhausted", "failure"),
    Kind.PROCESS_CRASH.value: ("process_crash", "failure"),
    Kind.SETUP_ERROR.value: ("setup_error", "failure"),
    Kind.SOFTWARE_FAULT.value: ("software_fault", "failure"),
    Kind.ERROR_NOT_MEMORY.value: ("software_fault", "failure"),
    Kind.CONTEXT_FULL.value: ("software_fault", "failure"),
    Kind.FAILURE_SILENT_ON_MEMORY.value: ("software_fault", "failure"),
    Kind.FAILURE_IN_HOST_CODE.value: ("software_fault", "failure"),
    Kind.EXCEPTION.value: ("exception", "signal"),
    Kind.PREEMPTION.value: ("preemption", "signal"),
    Kind.ENGINE_VERSION.value: ("server_start", "lifecycle"),
    Kind.STARTUP_BEGIN.value: ("server_start", "lifecycle"),
    Kind.STARTUP_COMPLETE.value: ("startup_complete", "lifecycle"),
}
# Kinds whose every line is its own identity (no two are "the same event" unless at the same time).
_KEYED_BY_KIND = {"gpu_oom", "engine_dead", "process_died", "host_oom_kill", "gpu_fault", "cuda_error",
                  "nccl_error", "preemption", "server_start", "startup_complete", "engine_start_failed",
                  "request_failed", "process_crash", "setup_error", "host_memory_exhausted", "software_fault"}
_NODE_LABELS = ("Hostname", "hostname", "node", "host", "kubernetes_node", "nodename", "pod", "instance")
_IMPACT_ALERT = re.compile(r"error|5xx|unavailable|down(?:$|[^a-z])|outage|availability|failing|crash", re.I)


# The longest Alertmanager waits before it first notifies of an alert: group_wait (30 s by default)
# plus one group_interval (5 min by default), with room for a slow rule evaluation.
NOTIFY_DELAY = timedelta(minutes=10)


def is_impact_alert(name: str, summary: str = "") -> bool:
    """Alerts on what users see (errors, availability) rather than on a resource (memory, KV)."""
    return bool(_IMPACT_ALERT.search(name or "") or _IMPACT_ALERT.search(summary or ""))


@dataclass
class AlertState:
    """One alert (by name and fingerprint) across every payload that mentions it."""

    name: str
    impact: bool                       # on errors / availability, not on a resource
    starts: datetime | None = None
    ends: datetime | None = None       # set when a resolved payload says so
    page: datetime | None = None       # when the firing notification arrived (payload file time)
    fired_at: str | None = None        # source:line of the firing record
    resolved_at: str | None = None     # source:line of the resolved record
    paged_from: str | None = None      # the payload file that gave `page`
    late_payload: str | None = None    # a payload that came long after the alert started: `page` is its start


@dataclass
class FromEvidence:
    raws: list[Raw]
    problems: list[str]
    alerts: dict[str, AlertState]


@dataclass
class _Reading:
    time: datetime
    value: float
    evidence: Evidence
    node: str | None


def _order(rec: Evidence, sub: int = 0) -> int:
    """Tie-break for equal times: the order the records were read in."""
    return rec.seq * 4 + sub


def from_evidence(evidence: EvidenceSet) -> FromEvidence:
    """Raw events, problems (records left out for want of a time, alerts out of order), alerts."""
    out: list[Raw] = []
    kv: dict[tuple, list[_Reading]] = {}
    waiting: dict[tuple, list[_Reading]] = {}
    preempt: dict[tuple, list[_Reading]] = {}
    gpus: dict[tuple, list[_Reading]] = {}
    budget = engine_budget(evidence)
    untimed: dict[str, int] = {}
    problems: list[str] = []
    alerts: dict[str, AlertState] = {}
    for rec, when in _timed(evidence, untimed):
        node = node_of(rec)
        kind = rec.kind
        if kind in _DIRECT:
            tkind, category = _DIRECT[kind]
            key = "" if tkind in _KEYED_BY_KIND else _norm(rec.text)
            # A bucket of repeated warnings (evidence/repeats.py) counts every line it stands for and
            # ends at its last line.
            repeats = rec.fields.get("repeats")
            out.append(Raw(when, tkind, category, _one_line(rec.text), where(rec.source, rec.line), rec.source,
                           node, key, _order(rec), until=rec.fields.get("until") if repeats else None,
                           extra_sources=(where(rec.source, rec.fields.get("last_line")),) if repeats else (),
                           weight=int(repeats or 1)))
        elif kind == Kind.POD_STATUS.value:
            out.extend(_pod(rec, when, node, problems))
        elif kind == Kind.ALERT.value:
            out.extend(_alert(rec, node, problems, alerts))
        elif kind == Kind.STATS.value:
            series = (rec.source,)
            if rec.fields.get("kv_usage") is not None:
                kv.setdefault(series, []).append(_Reading(when, float(rec.fields["kv_usage"]), rec, node))
            if rec.fields.get("waiting") is not None:
                waiting.setdefault(series, []).append(_Reading(when, float(rec.fields["waiting"]), rec, node))
        elif kind == Kind.METRIC.value:
            name = rec.fields.get("name")
            series = (name, node, _series_labels(rec.fields.get("labels") or {}))
            value = rec.fields.get("value")
            if value is None:
                continue
            reading = _Reading(when, float(value), rec, node)
            if name == "kv_cache_usage":
                kv.setdefault(series, []).append(reading)
            elif name == "requests_waiting":
                waiting.setdefault(series, []).append(reading)
            elif name == "preemptions_total":
                preempt.setdefault(series, []).append(reading)
        elif kind == Kind.GPU_MEMORY.value:
            used, total = rec.fields.get("used_bytes"), rec.fields.get("total_bytes")
            if used is not None and total:
                series = (rec.source, rec.fields.get("host"), rec.fields.get("gpu"), rec.fields.get("uuid"))
                gpus.setdefault(series, []).append(_Reading(when, used / total, rec, node))
    for readings in kv.values():
        out.extend(_crossings(readings, KV_HIGH, "kv_usage_high"))
        out.extend(_crossings(readings, KV_CRITICAL, "kv_usage_critical"))
    for readings in waiting.values():
        out.extend(_crossings(readings, WAITING_HIGH, "requests_waiting_high", rearm=WAITING_HIGH / 2))
    for readings in preempt.values():
        out.extend(_increases(readings, "preemption"))
    for readings in gpus.values():
        out.extend(_gpu(readings, budget))
    problems += [f"{src}: {n} record(s) without a time (none earlier in the file) left out of the timeline"
                 for src, n in untimed.items()]
    return FromEvidence(out, problems, alerts)


def _timed(evidence: EvidenceSet, untimed: dict[str, int]) -> Iterator[tuple[Evidence, datetime]]:
    last: dict[str, datetime] = {}
    for rec in sorted(evidence.items, key=lambda e: e.seq):
        when = rec.time or last.get(rec.source)
        if rec.time is not None:
            last[rec.source] = rec.time
        if when is None:
            if rec.kind in _DIRECT or rec.kind in (Kind.POD_STATUS.value, Kind.ALERT.value):
                untimed[rec.source] = untimed.get(rec.source, 0) + 1
            continue
        yield rec, when


def node_of(rec: Evidence) -> str | None:
    """The node an evidence record belongs to: labels and fields first, then the file name."""
    f = rec.fields
    labels = f.get("labels") or {}
    for name in _NODE_LABELS:
        value = labels.get(name) if isinstance(labels, dict) else None
        if value:
            return _strip_port(str(value)) if name == "instance" else str(value)
    for name in ("node", "host"):
        if f.get(name):
            return str(f[name])
    return node_from_file(rec.source)


def _strip_port(instance: str) -> str:
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() else instance


def _series_labels(labels: dict[str, Any]) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in labels.items() if k not in ("le", "quantile")))


def _pod(rec: Evidence, when: datetime, node: str | None, problems: list[str]) -> Iterator[Raw]:
    f = rec.fields
    src = where(rec.source, rec.line)
    text = _one_line(rec.text)
    started, finished = f.get("started_at"), f.get("finished_at")
    if f.get("state") == "terminated":
        if f.get("reason") == "OOMKilled":
            return   # the OOM_KILLED record of the same status says it (host_oom_kill)
        # A container that ended is the server dying: the same event as the log's engine death.
        yield Raw(when, "engine_dead", "failure", text, src, rec.source, node, "", _order(rec))
        begin, end = _iso(started), _iso(finished)
        if begin and end and end < begin:
            problems.append(f"{src}: container finished ({finished}) before it started ({started})")
    elif f.get("state") == "running":
        yield Raw(when, "server_start", "lifecycle", text, src, rec.source, node, "", _order(rec))
    elif f.get("state") == "waiting":
        yield Raw(when, "pod_status", "signal", text, src, rec.source, node, _norm(str(f.get("reason"))), _order(rec))


def _alert(rec: Evidence, node: str | None, problems: list[str], alerts: dict[str, AlertState]) -> Iterator[Raw]:
    f = rec.fields
    name = str(f.get("alertname") or "?")
    key = f"{name}|{f.get('fingerprint') or _series_labels(f.get('labels') or {})}"
    src = where(rec.source, rec.line)
    text = _one_line(rec.text)
    starts, ends = _iso(f.get("starts_at")), _iso(f.get("ends_at"))
    annotations = f.get("annotations") or {}
    state = alerts.setdefault(key, AlertState(name, is_impact_alert(name, str(annotations.get("summary") or ""))))
    state.starts = state.starts or starts
    if f.get("status") == "resolved" and ends is not None:
        if state.ends is None or ends > state.ends:
            state.ends, state.resolved_at = ends, src
    elif starts is not None:
        # The page went out when the payload arrived (its file is named by that time), not when
        # the alert started firing: Alertmanager waits group_wait before it notifies.
        # A payload that arrives later than Alertmanager ever waits before a first notification is
        # not the first page (a repeat, a redelivery, an alert added back-dated): the alert's own
        # start is then the best time of detection.
        received = payload_time(rec.source)
        late = received is not None and received - starts > NOTIFY_DELAY
        page = received if received is not None and received >= starts and not late else starts
        if state.page is None or page < state.page:
            state.page, state.fired_at = page, src
            state.paged_from = rec.source if page is received else None
            state.late_payload = rec.source if late else None
    if starts is not None:
        firing_text = text.replace(" resolved", " firing", 1) if f.get("status") == "resolved" else text
        yield Raw(starts, "alert_firing", "detection", firing_text, src, rec.source, node, key, _order(rec))
    if f.get("status") == "resolved" and ends is not None:
        yield Raw(ends, "alert_resolved", "recovery", text, src, rec.source, node, key, _order(rec, 1))
        if starts is not None and ends < starts:
            problems.append(f"{src}: alert {name} resolved ({f['ends_at']}) before it fired ({f['starts_at']})")


_PAYLOAD_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[T_ ](\d{2})[-:](\d{2})[-:](\d{2})(?:[.,](\d+))?Z?")


def payload_time(source: str) -> datetime | None:
    """The UTC time in a payload's file name (alerts/2026-03-12T14-17-05Z.json), if any."""
    m = _PAYLOAD_STAMP.search(os.path.basename(source))
    if not m:
        return None
    frac = f".{m.group(5)}" if m.group(5) else ""
    return parse_iso(f"{m.group(1)}T{m.group(2)}:{m.group(3)}:{m.group(4)}{frac}Z")


def _crossings(readings: list[_Reading], threshold: float, kind: str, rearm: float | None = None) -> Iterator[Raw]:
    """An event each time the series goes from below `threshold` to at or above it."""
    low = threshold - (REARM if rearm is None else rearm)
    armed = True
    for r in sorted(readings, key=lambda r: (r.time, r.evidence.seq)):
        if armed and r.value >= threshold:
            armed = False
            yield _reading_event(r, kind)
        elif not armed and r.value < low:
            armed = True


def _increases(readings: list[_Reading], kind: str) -> Iterator[Raw]:
    """A counter that went up between two scrapes."""
    prev = None
    for r in sorted(readings, key=lambda r: (r.time, r.evidence.seq)):
        if prev is not None and r.value > prev.value:
            yield _reading_event(r, kind)
        prev = r


def _gpu(readings: list[_Reading], budget: float | None) -> Iterator[Raw]:
    """nvidia-smi / DCGM readings: over the engine's budget (or full), and released after being busy."""
    if budget is not None:
        yield from _crossings([_Reading(r.time, r.value - budget, r.evidence, r.node) for r in readings],
                              DISCREPANCY, "memory_discrepancy", rearm=0.0)
    else:
        yield from _crossings(readings, GPU_FULL, "gpu_memory_full")
    busy = False
    for r in sorted(readings, key=lambda r: (r.time, r.evidence.seq)):
        if r.value >= 0.5:
            busy = True
        elif busy and r.value < RELEASED:
            busy = False
            yield _reading_event(r, "gpu_memory_released")


def _reading_event(r: _Reading, kind: str) -> Raw:
    e = r.evidence
    return Raw(r.time, kind, "signal", _one_line(e.text), where(e.source, e.line), e.source, r.node, "", _order(e, 2))


def engine_budget(evidence: EvidenceSet) -> float | None:
    """The engine's gpu_memory_utilization (triage.budget: the same reading as the classifier's)."""
    found = _engine_budget(evidence)
    return found[0] if found else None


_VOLATILE = re.compile(r"\b(?:cmpl|chatcmpl|req|seq)-[0-9a-f-]+\b|\b0x[0-9a-f]+\b|\d+(?:\.\d+)?", re.I)


def _norm(text: str) -> str:
    """Text with ids and numbers blanked: two lines equal under it say the same thing."""
    return _VOLATILE.sub("#", text)[:200]


def _one_line(text: str) -> str:
    """One line. Not yet redacted: build_timeline masks the merged rows (a few, not every raw line)
    before anything reads or cuts their text."""
    if text[:1].isspace() or text[-1:].isspace() or any(w in text for w in ("  ", "\n", "\r", "\t")):
        return " ".join(text.split())
    return text           # most lines: shared with the evidence record, not copied


def _iso(value: Any) -> datetime | None:
    return parse_iso(value) if isinstance(value, str) and value else None
