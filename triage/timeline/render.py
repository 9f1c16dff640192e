"""A timeline as a DataFrame, JSON (`triage.timeline/v1`), CSV, or rich text blocks for people.

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
    """The timeline for people: one block per event (a header line of time, node, kind and source,
    then the text with a hanging indent), the key moments, the durations, and a per-node summary.

    Blocks, not a table, as `classify --explain` does: at 80 columns (and piped output is 80 wide,
    see `triage.output.output_width`) a five-column table squeezed the source column to five
    characters and the node column behind an ellipsis. Header fields wrap between each other, never
    inside a path, a node name or a time."""
    from rich.text import Text

    from ..console import Console, flow, hang, item

    out = console or Console(highlight=False)
    days = {e.time.date() for e in timeline.events}
    one_day = len(days) <= 1
    stamp = "%H:%M:%S" if one_day else "%m-%d %H:%M:%S"
    title = f"{timeline.incident_id}" + (f" — {timeline.title}" if timeline.title else "")
    day = f", {next(iter(days))}" if one_day and days else ""
    hang(out, Text(title, style="bold"), 2, first="")
    out.print(Text(f"(all times UTC{day})", style="dim"))
    # Node names padded to the longest (up to 24 columns) so the kinds line up.
    node_width = min(24, max((len(n) for n in timeline.nodes), default=0))
    if timeline.events:
        out.print("\n[bold]Events[/bold]")
    for e in timeline.events:
        source = e.sources[0] + (f" +{len(e.sources) - 1}" if len(e.sources) > 1 else "")
        head = [Text(e.time.strftime(stamp), style="bold")]
        if node_width:
            head.append(Text((e.node or "").ljust(node_width)))
        head += [Text(e.kind, style=_STYLE.get(e.category, "")), Text(source, style="dim")]
        flow(out, head, first="  ", indent=6)
        tail = None
        if e.count > 1 and e.until is not None:
            tail = Text(f"×{e.count}, until {e.until.strftime(stamp)}", style="bold")
        elif e.until is not None:
            tail = Text(f"(until {e.until.strftime(stamp)})", style="dim")
        hang(out, Text(_short(mask_text(e.text))), 6, tail=tail)
    _render_moments(out, timeline, stamp)
    if len(timeline.nodes) > 1:
        _render_nodes(out, timeline, stamp)
    for title, items, style in (("Problems", timeline.problems, "red"), ("Missing", timeline.missing, "yellow")):
        if items:
            out.print(f"\n[bold {style}]{title}[/bold {style}]")
            for entry in items:
                item(out, "•", Text(entry))
    if timeline.time_note:
        out.print()
        hang(out, Text(f"Times: {timeline.time_note}.", style="dim"), 0)


def _render_moments(out, timeline: Timeline, stamp: str) -> None:
    """`  moment  time  source`, then how it was found, indented."""
    from rich.text import Text

    from ..console import flow, hang

    out.print("\n[bold]Key moments[/bold]")
    width = max(len(name) for name in MOMENT_NAMES)
    for name in MOMENT_NAMES:
        m = timeline.moments.get(name)
        if m is None:
            continue
        how = m.how
        if m.computed is not None:
            computed = m.computed.time.strftime(stamp) if m.computed.time else "unknown"
            how += f" (computed: {computed}, {m.computed.how})"
        flow(out, [Text(name.replace("_", " ").ljust(width), style="bold"), m.time.strftime(stamp) if m.time else "—",
                   Text(m.source or "", style="dim")], first="  ", indent=6)
        hang(out, Text(how), 6)
    # A duration ("TTR 1m 55s") and a label ("ttd: time to detect (impact start → detected)") are
    # never split across lines.
    out.print()
    flow(out, [f"{k.upper() if k != 'total' else 'total'} {duration_text(v) or '—'}"
               for k, v in timeline.durations.items()], first="  ", indent=4, sep="   ")
    for k in DURATIONS:
        hang(out, Text(f"{k}: {DURATION_LABELS[k]}", style="dim"), 4, first="  ")


def _render_nodes(out, timeline: Timeline, stamp: str) -> None:
    """One line per node (wrapped between its fields): the node's name, whole, then its counts."""
    from rich.text import Text

    from ..console import flow

    fleet = f" of a fleet of {timeline.fleet_size}" if timeline.fleet_size else ""
    out.print(f"\n[bold]Per node ({len(timeline.nodes)} seen{fleet})[/bold]")
    width = min(24, max(len(n) for n in timeline.nodes))
    groups = timeline.by_node()
    rows = []
    for node in timeline.nodes:
        events = groups.get(node, [])
        failures = [e for e in events if e.category == "failure"]
        last = max(events, key=lambda e: e.until or e.time)
        counts = [str(sum(e.count for e in events if e.kind == k)) for k in ("gpu_oom", "engine_dead", "restart")]
        rows.append((node, failures[0].time.strftime(stamp) if failures else "—", counts,
                     f"{(last.until or last.time).strftime(stamp)} {last.kind}"))
    digits = max(len(c) for row in rows for c in row[2])      # counts right-aligned, so the fields line up
    for node, first, counts, last in rows:
        flow(out, [Text(node.ljust(width), style="bold"), f"first failure {first.ljust(len(stamp))}",
                   f"GPU OOMs {counts[0]:>{digits}}", f"engine deaths {counts[1]:>{digits}}",
                   f"restarts {counts[2]:>{digits}}", f"last event {last}"], first="  ", indent=6)


def _short(text: str, limit: int = 240) -> str:
    from ..console import shorten

    return shorten(text, limit)
