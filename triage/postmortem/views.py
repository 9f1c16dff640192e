"""What a postmortem template receives: plain, frozen records, every claim with its sources.

Times are already formatted (UTC) and every string is already redacted, so a template only
lays things out. templates/README.md documents each field; a test keeps the two in step.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..units import clock_parts

MOMENT_LABELS = {"impact_start": "impact start", "detected": "detected", "first_response": "first response",
                 "mitigated": "mitigated", "resolved": "resolved"}
DURATION_LABELS = {"ttd": "time to detect", "ttr": "time to respond", "ttm": "time to mitigate",
                   "total": "duration"}


@dataclass(frozen=True)
class Claim:
    """One statement and the `source:line` citations that back it."""
    text: str
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class MomentView:
    name: str                         # impact_start | detected | first_response | mitigated | resolved
    label: str                        # "impact start"
    time: str | None                  # "14:16:52" (UTC), None when the evidence does not give it
    date: str | None                  # "2026-03-12"
    iso: str | None                   # "2026-03-12T14:16:52Z"
    how: str                          # how it was established, or why it is missing
    sources: tuple[str, ...] = ()
    computed: "MomentView | None" = None   # what the evidence gave, when a note overrides it


@dataclass(frozen=True)
class DurationView:
    name: str                         # ttd | ttr | ttm | total (see triage.timeline DURATIONS)
    label: str                        # "time to detect"
    span: str                         # "impact start → detected"
    text: str | None                  # "29 min 47 s", None when a moment is missing
    seconds: int | None
    sources: tuple[str, ...] = ()     # the two moments' sources


@dataclass(frozen=True)
class IncidentInfo:
    id: str
    title: str
    severity: str | None
    service: str | None
    created: str | None
    links: tuple[str, ...]
    path: str                         # the bundle directory's name


@dataclass(frozen=True)
class Impact:
    duration: DurationView
    start: MomentView
    end: MomentView
    nodes_affected: int | None
    fleet_size: int | None
    nodes: tuple[str, ...]
    nodes_sources: tuple[str, ...]    # incident.yaml (for N), then each affected node's first failure
    claims: tuple[Claim, ...]         # failures, requests dropped, error rate, pods restarted, ...
    nodes_added: tuple[str, ...] = ()  # affected nodes first seen starting after impact began (added capacity)


@dataclass(frozen=True)
class CauseView:
    id: str
    title: str
    detail: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class StepView:
    question: str
    answer: str
    why: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class EvidenceView:
    n: int
    where: str                        # source:line
    time: str | None                  # "2026-03-12 14:16:52"
    kind: str
    text: str                         # shortened to EXCERPT characters


@dataclass(frozen=True)
class RootCause:
    oom_class: str
    label: str                        # "runtime burst OOM"
    confidence: float
    summary: Claim
    causes: tuple[CauseView, ...]
    path: tuple[StepView, ...]
    evidence: tuple[EvidenceView, ...]


@dataclass(frozen=True)
class EarlierSignal:
    """A signal in the evidence that an alert could have caught before the incident was detected."""
    signal: str                       # what was seen
    alert: str                        # the rule that would have fired
    time: str                         # first time it held (UTC)
    lead: str | None                  # how long before detection ("12 min 04 s before detection")
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Detection:
    moment: MomentView
    ttd: DurationView
    claims: tuple[Claim, ...]
    sooner: tuple[EarlierSignal, ...]


@dataclass(frozen=True)
class RecoveryStep:
    n: int
    step: str
    action: str
    started: str | None               # "14:31:02"
    ended: str | None
    result: str                       # ok | failed | timeout | skipped | interrupted | aborted | "no end record"
    duration: str | None
    user: str | None
    detail: str                       # redacted arguments, shortened
    sources: tuple[str, ...]


@dataclass(frozen=True)
class Response:
    first_response: MomentView
    mitigated: MomentView
    resolved: MomentView
    ttm: DurationView
    ttr: DurationView
    steps: tuple[RecoveryStep, ...]
    claims: tuple[Claim, ...]         # what people noted and did, in time order ("14:19:00 scaling ...")


@dataclass(frozen=True)
class TimelineRow:
    time: str                         # "14:16:52"
    date: str
    iso: str
    category: str                     # signal | failure | detection | response | recovery | note
    kind: str                         # gpu_oom, kv_usage_high, alert_firing, note, ... (the timeline's)
    text: str                         # shortened to 160 characters
    node: str | None
    count: int
    until: str | None
    sources: tuple[str, ...]


@dataclass(frozen=True)
class SeriesView:
    label: str
    kind: str                         # gpu_memory | kv_cache | oom
    points: int
    first: str                        # "14:00:01 19.6%"
    peak: str                         # "99.2% at 14:16:30"
    last: str
    sources: tuple[str, ...]          # the first, peak and last readings


@dataclass(frozen=True)
class ChartView:
    path: str | None                  # link target relative to the markdown file; None: not written
    note: str                         # what it shows, or why there is no chart
    series: tuple[SeriesView, ...]
    legend: str = ""                  # how to read it (key moments, gaps, axis break); "" without a chart


@dataclass(frozen=True)
class Lessons:
    went_well: tuple[Claim, ...]
    went_wrong: tuple[Claim, ...]
    lucky: tuple[Claim, ...]


@dataclass(frozen=True)
class ActionItem:
    n: int
    title: str
    kind: str                         # mitigate | prevent | detect | process | investigate
    priority: str                     # P1 | P2 | P3
    owner: str                        # placeholder until someone takes it
    due: str
    why: str
    sources: tuple[str, ...]


@dataclass(frozen=True)
class ConfigChange:
    setting: str
    before: str
    after: str
    basis: str                        # incident | rule_of_thumb | knowledge_base
    why: str


@dataclass(frozen=True)
class ConfigDiff:
    changes: tuple[ConfigChange, ...]
    diff: tuple[str, ...]             # unified-diff lines of the launch settings (" ", "-", "+")
    new_command: str | None
    sources: tuple[str, ...]          # where the launch settings were read


@dataclass(frozen=True)
class InputView:
    path: str
    parser: str
    records: int
    time_note: str | None


@dataclass(frozen=True)
class Context:
    """The whole template context; `as_mapping()` gives the top-level variables."""
    incident: IncidentInfo
    generated_at: str
    generated_basis: str
    date: str
    status: str
    summary: tuple[Claim, ...]
    moments: dict[str, MomentView]
    durations: dict[str, DurationView]
    impact: Impact
    root_cause: RootCause
    trigger: tuple[Claim, ...]
    detection: Detection
    response: Response
    timeline: tuple[TimelineRow, ...]
    mermaid: str
    chart: ChartView
    lessons: Lessons
    action_items: tuple[ActionItem, ...]
    config: ConfigDiff
    evidence: tuple[EvidenceView, ...]
    inputs: tuple[InputView, ...]
    missing: tuple[str, ...]
    problems: tuple[str, ...]
    facts: dict[str, Any] = field(default_factory=dict)
    mermaid_note: str = ""            # what the diagram leaves out ("" when it shows every event)

    def as_mapping(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


# -- formatting (UTC, fixed widths: the output must not depend on the reader's locale) ----------

def hms(t: datetime | None) -> str | None:
    return t.strftime("%H:%M:%S") if t else None


def day(t: datetime | None) -> str | None:
    return t.strftime("%Y-%m-%d") if t else None


def stamp(t: datetime | None) -> str | None:
    return t.strftime("%Y-%m-%d %H:%M:%S") if t else None


def iso_z(t: datetime | None) -> str | None:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ") if t else None


def span(d: timedelta | None) -> str | None:
    """29 min 47 s; 1 h 02 min 03 s; 45 s; 2 d 03 h 10 min."""
    if d is None:
        return None
    sign, days, hours, minutes, seconds = clock_parts(d)
    if days:
        return f"{sign}{days} d {hours:02d} h {minutes:02d} min"
    if hours:
        return f"{sign}{hours} h {minutes:02d} min {seconds:02d} s"
    if minutes:
        return f"{sign}{minutes} min {seconds:02d} s"
    return f"{sign}{seconds} s"
