"""The incident as a mermaid gantt diagram: the phases as bars, the key events as milestones.

A gantt (not mermaid's `timeline`) because it puts real times on one axis, so TTD and TTM show as
lengths. Task names cannot hold `:` `#` or `;` in mermaid, so those are replaced, and a name that
would read as a gantt statement (`click ...`, `section ...`, `%%`) is prefixed.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Sequence

from .views import span

MAX_MILESTONES = 14
_PHASES = (("impact_start", "detected", "Time to detect"), ("detected", "first_response", "Time to respond"),
           ("impact_start", "mitigated", "Time to mitigate"), ("mitigated", "resolved", "Recovery to resolution"))
_SECTION = {"failure": "Failures", "detection": "Detection", "response": "Response", "recovery": "Recovery",
            "note": "Notes", "signal": "Signals"}


def gantt(title: str, moments: dict[str, Any], events: Sequence[Any]) -> str:
    """`moments`: name -> Moment (time may be None); `events`: timeline Events (time, category, text, node)."""
    times = {name: m.time for name, m in moments.items() if m is not None and m.time is not None}
    lines = ["gantt", f"    title {_clean(title)} (UTC)", "    dateFormat YYYY-MM-DD HH:mm:ss",
             "    axisFormat %H:%M"]
    phases = [(label, times[a], times[b]) for a, b, label in _PHASES if a in times and b in times and times[b] > times[a]]
    if "impact_start" in times and "resolved" in times:
        phases.insert(0, ("Impact", times["impact_start"], times["resolved"]))
    if phases:
        lines.append("    section Incident")
        for i, (label, start, end) in enumerate(phases):
            crit = "crit, " if label == "Impact" else ""
            lines.append(f"    {label} ({span(end - start)}) :{crit}p{i}, {_t(start)}, {_t(end)}")
    picked = _milestones(events)
    n = 0
    for category in ("failure", "signal", "detection", "response", "recovery", "note"):
        rows = [e for e in picked if e.category == category]
        if not rows:
            continue
        lines.append(f"    section {_SECTION[category]}")
        for e in rows:
            n += 1
            lines.append(f"    {_task_name(_label(e))} :milestone, m{n}, {_t(e.time)}, 0d")
    if len(lines) == 4:
        lines.append("    section Evidence")
        lines.append("    No dated events in the evidence :milestone, m0, 1970-01-01 00:00:00, 0d")
    return "\n".join(lines) + "\n"


_KIND_LABELS = {"gpu_oom": "GPU OOM", "engine_dead": "engine died", "process_died": "process died",
                "host_oom_kill": "host OOM kill", "gpu_fault": "GPU fault", "engine_start_failed": "start-up failed",
                "server_start": "server start", "startup_complete": "server ready", "restart": "restart"}


_STEP = re.compile(r"^recovery step '([^']+)' \(([^)]+)\): (\w+)")


def _label(e: Any) -> str:
    step = _STEP.match(e.text)
    if step:                                          # a recovery step from actions.jsonl
        return f"{step.group(1)} ({step.group(2)}) {step.group(3)}"
    if e.kind in _KIND_LABELS:
        text = _KIND_LABELS[e.kind]
    elif e.kind.startswith("alert_"):
        text = e.text.split(" (")[0]                  # "ALERT GPUMemoryExhausted firing"
    else:
        text = _short(e.text)
    return f"{text} {e.node}" if e.node and e.node not in text else text


_NOUNS = {"failure": "failures", "detection": "detection events", "response": "response events",
          "recovery": "recovery events", "note": "notes"}


def omitted(events: Sequence[Any]) -> str:
    """The sentence the document prints under the diagram when it leaves events out ("" when it
    shows them all): which, and how many of each kind."""
    candidates = _candidates(events)
    picked = _milestones(events)
    if len(picked) == len(candidates):
        return ""
    counts = []
    for category in ("failure", "detection", "response", "recovery", "note"):
        total = sum(1 for e in candidates if e.category == category)
        shown = sum(1 for e in picked if e.category == category)
        if shown < total:
            counts.append(f"{shown} of {total} {_NOUNS[category]}")
    listed = ", ".join(counts[:-1]) + " and " + counts[-1] if len(counts) > 1 else counts[0]
    return (f"The diagram shows {listed} (at most {MAX_MILESTONES} events: the earliest, and the last); "
            "the timeline table lists them all.")


def _candidates(events: Sequence[Any]) -> list[Any]:
    """The first failure per node (a GPU OOM before the engine-dead line of the same second), and
    every detection, response, recovery and note, in time order."""
    seen_nodes: set[Any] = set()
    out = []
    for e in sorted(events, key=lambda e: (e.time, e.kind != "gpu_oom")):
        if e.category == "failure":
            if e.node in seen_nodes:
                continue
            seen_nodes.add(e.node)
        elif e.category == "signal":
            continue
        out.append(e)
    return out


def _milestones(events: Sequence[Any]) -> list[Any]:
    """The candidates; when they are too many, the earliest are kept, and the last (`omitted`
    says so in the document)."""
    out = _candidates(events)
    if len(out) > MAX_MILESTONES:
        keep = set(id(e) for e in out[: MAX_MILESTONES - 1]) | {id(out[-1])}
        out = [e for e in out if id(e) in keep]
    return out


def _t(t: datetime) -> str:
    return t.strftime("%Y-%m-%d %H:%M:%S")


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _clean(text: str) -> str:
    # mermaid gantt: ':' separates the task name from its data, '#' and ';' end a statement.
    return " ".join(re.sub(r"[:#;]", " ", text).split())


# A line that starts with one of these is a gantt statement, not a task ("click here" is a click
# binding, "section 3 failed" opens a section, "%%" a comment): such a task name gets a prefix.
_STATEMENT = re.compile(r"(?i)^(?:%|(?:gantt|dateformat|inclusiveenddates|topaxis|axisformat|tickinterval|includes|"
                        r"excludes|todaymarker|weekday|weekend|title|acctitle|accdescr|section|click|call|href|"
                        r"callbackname|callbackargs|displaymode|vert)\b)")


def _task_name(text: str) -> str:
    name = _clean(text) or "(no text)"
    return f"- {name}" if _STATEMENT.match(name) else name
