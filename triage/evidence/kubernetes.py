"""Kubernetes state: `kubectl get pod -o json` (a Pod or a List of them) and `kubectl get events -o json`.

Container states become POD_STATUS records (current and last state of every container, init
containers included). A terminated state with reason OOMKilled is also an OOM_KILLED record:
that is the kernel's cgroup OOM killer, i.e. host RAM (formats.md 7). Exit code 137 alone only
says SIGKILL (liveness probe, eviction, a manual kill), so it is flagged, not promoted.

Events become HOST_OOM_KILL records when they are the node's OOM reports (kubelet SystemOOM,
node-problem-detector OOMKilling, or the kernel's OOM text in the message). Other events are
dropped: they are not facts the flowchart reads.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Iterator, Mapping

from ..errors import BadInput
from ..lazyre import lazy
from ..model import Evidence
from ..timeref import parse_iso
from ..units import whole
from .base import InputFile, ParseContext, json_head, looks_binary
from .kinds import Kind

NAME = "kubernetes"

_SNIFF_RE = lazy(
    rb'"kind"\s*:\s*"(?:Pod|PodList|Event|EventList)"|"containerStatuses"\s*:|"involvedObject"\s*:')
_API_RE = re.compile(rb'"apiVersion"\s*:')
_OOM_EVENT_REASONS = frozenset({"SystemOOM", "OOMKilling"})
_OOM_EVENT_TEXT = ("Memory cgroup out of memory", "Out of memory: Killed process")
# status list -> "is an init container"
_STATUS_LISTS = {"initContainerStatuses": True, "containerStatuses": False, "ephemeralContainerStatuses": False}
_SIGKILL_EXIT = 137


# ---------------------------------------------------------------------------------- sniff


def sniff(head: bytes, name: str) -> int:
    if not head or looks_binary(head) or not json_head(head):
        return 0
    if not _SNIFF_RE.search(head):
        return 0
    return 85 if _API_RE.search(head) else 60


# ---------------------------------------------------------------------------------- parse


def parse(src: InputFile, ctx: ParseContext) -> Iterator[Evidence]:
    doc = src.read_json()
    objects = list(_objects(doc))
    if not objects:
        raise BadInput(src.display, "JSON holds no Kubernetes Pod or Event")
    pods = [o for o in objects if _is_pod(o)]
    events = [o for o in objects if _is_event(o)]
    status_lines = src.key_lines(b'"restartCount"', sum(_status_count(p) for p in pods))
    event_lines = src.key_lines(b'"involvedObject"', len(events)) if events else []
    if events and not any(event_lines):
        event_lines = src.key_lines(b'"regarding"', len(events))   # events.k8s.io/v1 shape
    for pod in pods:
        yield from _pod_evidence(src, ctx, pod, status_lines)
    for event, line in zip(events, event_lines):
        ev = _event_evidence(src, ctx, event, line)
        if ev is not None:
            yield ev


def _objects(doc: Any) -> Iterator[Mapping[str, Any]]:
    """Pods and events, from a single object, a List/PodList/EventList, or a bare JSON array."""
    if isinstance(doc, list):
        items: Any = doc
    elif isinstance(doc, dict) and isinstance(doc.get("items"), list):
        items = doc["items"]
    else:
        items = [doc]
    for item in items:
        if isinstance(item, dict) and (_is_pod(item) or _is_event(item)):
            yield item


def _is_pod(obj: Mapping[str, Any]) -> bool:
    if obj.get("kind") == "Pod":
        return True
    status = obj.get("status")
    return obj.get("kind") is None and isinstance(status, dict) and (
        "containerStatuses" in status or "initContainerStatuses" in status)


def _is_event(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Event" or (
        obj.get("kind") is None and ("involvedObject" in obj or "regarding" in obj))




# ---- pods


def _status_count(pod: Mapping[str, Any]) -> int:
    status = _dict(pod.get("status"))
    return sum(len(_list(status.get(key))) for key in _STATUS_LISTS)


def _pod_evidence(src: InputFile, ctx: ParseContext, pod: Mapping[str, Any],
                  lines: list[int | None]) -> Iterator[Evidence]:
    meta = _dict(pod.get("metadata"))
    status = _dict(pod.get("status"))
    base = {
        "pod": meta.get("name"),
        "namespace": meta.get("namespace"),
        "node": _dict(pod.get("spec")).get("nodeName"),
    }
    # Document order (kubectl sorts keys), so that the n-th status matches the n-th restartCount line.
    for key in [k for k in status if k in _STATUS_LISTS]:
        init = _STATUS_LISTS[key]
        for cs in _list(status.get(key)):
            line = lines.pop(0) if lines else None
            if not isinstance(cs, dict):
                continue
            for which, state in (("current", cs.get("state")), ("last", cs.get("lastState"))):
                yield from _state_evidence(src, ctx, line, base, cs, init, which, _dict(state))


def _state_evidence(src: InputFile, ctx: ParseContext, line: int | None, base: Mapping[str, Any],
                    cs: Mapping[str, Any], init: bool, which: str,
                    state: Mapping[str, Any]) -> Iterator[Evidence]:
    for name in ("terminated", "waiting", "running"):
        if isinstance(state.get(name), dict):
            detail = state[name]
            break
    else:
        return  # `lastState: {}`: the container never ended
    exit_code = _int(detail.get("exitCode"))
    signal = _int(detail.get("signal"))
    fields: dict[str, Any] = {
        **base,
        "container": cs.get("name"),
        "init_container": init,
        "state": name,
        "which": which,
        "reason": detail.get("reason"),
        "message": detail.get("message"),
        "exit_code": exit_code,
        "signal": signal,
        "sigkill": exit_code == _SIGKILL_EXIT or signal == 9,
        "restart_count": _int(cs.get("restartCount")),
        "started_at": detail.get("startedAt"),
        "finished_at": detail.get("finishedAt"),
    }
    time = _time(detail.get("finishedAt")) or _time(detail.get("startedAt"))
    text = _render_state(fields)
    yield ctx.evidence(src, line, Kind.POD_STATUS, text, time=time, **fields)
    if name == "terminated" and fields["reason"] == "OOMKilled":
        yield ctx.evidence(src, line, Kind.OOM_KILLED, text, time=time, **fields)


def _render_state(f: Mapping[str, Any]) -> str:
    where = f"{f['namespace']}/{f['pod']}" if f.get("namespace") else str(f.get("pod"))
    label = "last state" if f["which"] == "last" else "state"
    text = f"pod {where} container {f['container']} {label} {f['state']}"
    if f.get("reason"):
        text += f": {f['reason']}"
    if f.get("exit_code") is not None:
        text += f" (exit code {f['exit_code']})"
    when = f.get("finished_at") or f.get("started_at")
    if when:
        text += f" at {when}"
    if f.get("restart_count") is not None:
        text += f", restarts {f['restart_count']}"
    return text


# ---- events


def _event_evidence(src: InputFile, ctx: ParseContext, event: Mapping[str, Any],
                    line: int | None) -> Evidence | None:
    reason = _str(event.get("reason"))
    message = _str(event.get("message")) or _str(event.get("note"))
    if reason not in _OOM_EVENT_REASONS and not any(t in message for t in _OOM_EVENT_TEXT):
        return None
    obj = _dict(event.get("involvedObject") or event.get("regarding"))
    series = _dict(event.get("series"))
    count = _int(event.get("count")) or _int(event.get("deprecatedCount")) or _int(series.get("count"))
    source = _dict(event.get("source"))
    fields: dict[str, Any] = {
        "reason": reason or None,
        "message": message or None,
        "object": _object_name(obj),
        "namespace": obj.get("namespace"),     # node events live in "default"; that says nothing
        "node": source.get("host") or event.get("reportingInstance") or _node_of(obj),
        "count": count,
        "type": event.get("type"),
        "component": source.get("component") or event.get("reportingController")
                     or event.get("reportingComponent"),
    }
    time = _event_time(event)
    text = f"event {fields['type'] or ''} {reason} {fields['object']}: {message}".replace("  ", " ")
    return ctx.evidence(src, line, Kind.HOST_OOM_KILL, text, time=time, **fields)


def _event_time(event: Mapping[str, Any]) -> datetime | None:
    series = _dict(event.get("series"))
    for value in (event.get("lastTimestamp"), series.get("lastObservedTime"),
                  event.get("deprecatedLastTimestamp"), event.get("eventTime"),
                  event.get("firstTimestamp"), event.get("deprecatedFirstTimestamp")):
        when = _time(value)
        if when is not None:
            return when
    return None


def _object_name(obj: Mapping[str, Any]) -> str | None:
    if not obj.get("name"):
        return None
    kind = obj.get("kind") or "?"
    ns = obj.get("namespace")
    return f"{kind}/{ns}/{obj['name']}" if ns else f"{kind}/{obj['name']}"


def _node_of(obj: Mapping[str, Any]) -> str | None:
    return obj.get("name") if obj.get("kind") == "Node" else None


# ---- small readers


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("-").isdigit()):
        return whole(value)
    return None


def _time(value: Any) -> datetime | None:
    return parse_iso(value) if isinstance(value, str) else None
