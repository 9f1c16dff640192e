"""The timeline's records: events, key moments, and the timeline that holds them.

Plain frozen dataclasses (no pandas here), so that the postmortem and tests can build them
in memory. Every time is an aware UTC datetime.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

#: What an event means for the incident, in the order a reader scans them.
CATEGORIES = ("signal", "failure", "detection", "response", "recovery", "note")

#: The key moments, in lifecycle order.
MOMENT_NAMES = ("impact_start", "detected", "first_response", "mitigated", "resolved")

#: Each duration and the two moments it spans (from, to). `ttr` is time to *respond*: every
#: moment after impact start has exactly one duration ending at it.
DURATIONS: dict[str, tuple[str, str]] = {
    "ttd": ("impact_start", "detected"),
    "ttr": ("detected", "first_response"),
    "ttm": ("impact_start", "mitigated"),
    "total": ("impact_start", "resolved"),
}
DURATION_LABELS = {
    "ttd": "time to detect (impact start → detected)",
    "ttr": "time to respond (detected → first response)",
    "ttm": "time to mitigate (impact start → mitigated)",
    "total": "total duration (impact start → resolved)",
}


@dataclass(frozen=True)
class Event:
    """One row of the timeline: one occurrence (or a run of identical ones) seen in 1+ sources."""

    time: datetime                  # tz-aware UTC (the first occurrence)
    kind: str                       # "gpu_oom", "engine_dead", "kv_usage_high", "alert_firing", "note", ...
    category: str                   # one of CATEGORIES
    text: str                       # the original text (redacted), one line
    sources: tuple[str, ...]        # "path/relative/to/incident:line" for every source merged in
    node: str | None = None         # pod / instance / host label
    count: int = 1                  # collapsed repeats
    until: datetime | None = None   # end of the span: the last repeat, or the end of a recovery step


@dataclass(frozen=True)
class Moment:
    name: str                       # one of MOMENT_NAMES
    time: datetime | None
    source: str | None              # "source:line" it came from
    how: str                        # one phrase: "first GPU OOM in logs/gpu-node-07.log", ...
    computed: "Moment | None" = None   # set by hand: the value computed from the evidence

    @property
    def overridden(self) -> bool:
        return self.computed is not None


@dataclass
class Timeline:
    incident_id: str
    title: str
    events: list[Event]
    moments: dict[str, Moment]
    durations: dict[str, timedelta | None]   # keys of DURATIONS
    nodes: list[str]                          # nodes seen (fleet grouping)
    fleet_size: int | None                    # from incident.yaml when known
    problems: list[str] = field(default_factory=list)   # order violations, corrupt lines, ...
    missing: list[str] = field(default_factory=list)    # what the bundle lacks and what that costs
    time_note: str | None = None              # how year-less / zone-less times were read

    def by_node(self) -> dict[str | None, list[Event]]:
        """Events grouped per node (None: events that belong to no single node)."""
        out: dict[str | None, list[Event]] = {}
        for event in self.events:
            out.setdefault(event.node, []).append(event)
        return out
