"""A timeline as a DataFrame, JSON (`triage.timeline/v1`), CSV, or a rich table for people.

Every export is masked (`triage.redact.redact_output`) as it is made, on top of the masking the
timeline's build already did: a row is masked before it is cut or laid out.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from ..redact import mask_text, redact_output
from ..units import clock_parts
from .model import DURATION_LABELS, DURATIONS, MOMENT_NAMES, Event, Moment, Timeline

SCHEMA_ID = "triage.timeline/v1"
COLUMNS = ("time", "until", "count", "node", "category", "kind", "text", "sources")


def to_frame(timeline: Timeline):
    """One row per event; times are UTC pandas Timestamps, sources joined with "; "."""
    import pandas as pd

    rows = [redact_output({"time": e.time, "until": e.until, "count": e.count, "node": e.node,
                           "category": e.category, "kind": e.kind, "text": e.text, "sources": "; ".join(e.sources)})
            for e in timeline.events]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    for col in ("time", "until"):
        frame[col] = pd.to_datetime(frame[col], utc=True)
    return frame


def to_csv(timeline: Timeline) -> str:
    frame = to_frame(timeline)
    for col in ("time", "until"):
        frame[col] = [iso(t.to_pydatetime()) if not _na(t) else "" for t in frame[col]]
    return frame.to_csv(index=False, lineterminator="\n")


def to_json(timeline: Timeline) -> dict[str, Any]:
    return redact_output({
        "schema": SCHEMA_ID,
        "incident": {"id": timeline.incident_id, "title": timeline.title},
        "fleet_size": timeline.fleet_size,
        "nodes": list(timeline.nodes),
        "time_note": timeline.time_note,
        "moments": {name: _moment(m) for name, m in timeline.moments.items()},
        "durations": {k: (v.total_seconds() if v is not None else None) for k, v in timeline.durations.items()},
        "durations_text": {k: duration_text(v) for k, v in timeline.durations.items()},
        "duration_labels": dict(DURATION_LABELS),
        "events": [_event(e) for e in timeline.events],
        "problems": list(timeline.problems),
        "missing": list(timeline.missing),
    })


def _moment(m: Moment) -> dict[str, Any]:
    out: dict[str, Any] = {"time": iso(m.time), "source": m.source, "how": m.how}
    out["computed"] = _moment(m.computed) if m.computed is not None else None
    return out


def _event(e: Event) -> dict[str, Any]:
    return {"time": iso(e.time), "until": iso(e.until), "count": e.count, "node": e.node, "category": e.category,
            "kind": e.kind, "text": e.text, "sources": list(e.sources)}


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    moment = moment.astimezone(timezone.utc)
    spec = "milliseconds" if moment.microsecond else "seconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def duration_text(value: timedelta | None) -> str | None:
    """`13s`, `29m 47s`, `1h 02m 03s`; rounded to the second."""
    if value is None:
        return None
    sign, days, h, m, s = clock_parts(value)
    h += 24 * days
    if h:
        return f"{sign}{h}h {m:02d}m {s:02d}s"
    if m:
        return f"{sign}{m}m {s:02d}s"
    return f"{sign}{s}s"


def _na(value) -> bool:
    import pandas as pd

    return value is None or pd.isna(value)


# -- for people -----------------------------------------------------------------------------------

_STYLE = {"signal": "yellow", "failure": "bold red", "detection": "magenta", "response": "cyan",
          "recovery": "green", "note": "blue"}


def render_timeline(timeline: Timeline, console=None) -> None:
    from ..console import Console
    from rich.table import Table
    from rich.text import Text

    out = console or Console(highlight=False)
    days = {e.time.date() for e in timeline.events}
    one_day = len(days) <= 1
    stamp = "%H:%M:%S" if one_day else "%m-%d %H:%M:%S"
    title = f"{timeline.incident_id}" + (f" — {timeline.title}" if timeline.title else "")
    day = f", {next(iter(days))}" if one_day and days else ""
    table = Table(title=f"{title}\n(all times UTC{day})", title_justify="left", expand=True)
    table.add_column("time", no_wrap=True)
    show_nodes = bool(timeline.nodes)
    if show_nodes:
        table.add_column("node", no_wrap=True)
    table.add_column("what", no_wrap=True)
    table.add_column("event", overflow="fold", ratio=3)
    table.add_column("source", overflow="fold", ratio=1)
    for e in timeline.events:
        when = e.time.strftime(stamp)
        text = Text(_short(mask_text(e.text)))
        if e.count > 1 and e.until is not None:
            text.append(f"  ×{e.count}, until {e.until.strftime(stamp)}", style="bold")
        elif e.until is not None:
            text.append(f"  (until {e.until.strftime(stamp)})", style="dim")
        source = e.sources[0] + (f" +{len(e.sources) - 1}" if len(e.sources) > 1 else "")
        row = [when] + ([e.node or ""] if show_nodes else []) + [Text(e.kind, style=_STYLE.get(e.category, "")),
                                                                  text, Text(source, style="dim")]
        table.add_row(*row)
    out.print(table)
    _render_moments(out, timeline, stamp)
    if len(timeline.nodes) > 1:
        _render_nodes(out, timeline, stamp)
    for title, items, style in (("Problems", timeline.problems, "red"), ("Missing", timeline.missing, "yellow")):
        if items:
            out.print(f"\n[bold {style}]{title}[/bold {style}]")
            for item in items:
                out.print(Text(f"  • {item}"))
    if timeline.time_note:
        out.print(Text(f"\nTimes: {timeline.time_note}.", style="dim"))


def _render_moments(out, timeline: Timeline, stamp: str) -> None:
    from rich.table import Table
    from rich.text import Text

    table = Table(title="Key moments", title_justify="left")
    for col in ("moment", "time", "how", "source"):
        table.add_column(col, overflow="fold", no_wrap=col in ("moment", "time"))
    for name in MOMENT_NAMES:
        m = timeline.moments.get(name)
        if m is None:
            continue
        how = m.how
        if m.computed is not None:
            computed = m.computed.time.strftime(stamp) if m.computed.time else "unknown"
            how += f" (computed: {computed}, {m.computed.how})"
        table.add_row(name.replace("_", " "), m.time.strftime(stamp) if m.time else "—", Text(how),
                      Text(m.source or "", style="dim"))
    out.print(table)
    parts = [f"{k.upper() if k != 'total' else 'total'} {duration_text(v) or '—'}" for k, v in timeline.durations.items()]
    out.print("  " + "   ".join(parts))
    out.print(Text("  " + "; ".join(f"{k}: {DURATION_LABELS[k]}" for k in DURATIONS), style="dim"))


def _render_nodes(out, timeline: Timeline, stamp: str) -> None:
    from rich.table import Table

    fleet = f" of a fleet of {timeline.fleet_size}" if timeline.fleet_size else ""
    table = Table(title=f"Per node ({len(timeline.nodes)} seen{fleet})", title_justify="left")
    for col in ("node", "first failure", "GPU OOMs", "engine deaths", "restarts", "last event"):
        table.add_column(col, no_wrap=True)
    groups = timeline.by_node()
    for node in timeline.nodes:
        events = groups.get(node, [])
        failures = [e for e in events if e.category == "failure"]
        last = max(events, key=lambda e: e.until or e.time)
        table.add_row(node, failures[0].time.strftime(stamp) if failures else "—",
                      *(str(sum(e.count for e in events if e.kind == k)) for k in ("gpu_oom", "engine_dead", "restart")),
                      f"{(last.until or last.time).strftime(stamp)} {last.kind}")
    out.print(table)


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
