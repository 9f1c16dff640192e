"""The verdict, timeline and chart turned into their template views (see views.py)."""
from __future__ import annotations

from typing import Any, Sequence

from ..classes import registry
from ..evidence.kinds import Kind
from ..model import EvidenceSet, Verdict
from ..report import to_json
from .chart import Chart
from .signals import excerpt
from .views import (
    CauseView, ChartView, Claim, ConfigChange, ConfigDiff, EvidenceView, RootCause, SeriesView, StepView, TimelineRow,
    day, hms, iso_z,
)

CLASS_LABELS = registry().labels()
EXCERPT = 300
ROW_TEXT = 160


def root_cause_view(verdict: Verdict) -> RootCause:
    table = to_json(verdict)["evidence"]
    views = tuple(EvidenceView(i + 1, f"{e['source']}:{e['line']}" if e["line"] else e["source"],
                               (e["time"] or "").replace("T", " ").replace("Z", "")[:19] or None,
                               e["kind"], excerpt(e["text"], EXCERPT)) for i, e in enumerate(table))
    cls = verdict.oom_class.value
    return RootCause(
        oom_class=cls, label=CLASS_LABELS.get(cls, cls), confidence=round(float(verdict.confidence), 2),
        summary=Claim(verdict.summary, tuple(e.where for e in verdict.evidence)),
        causes=tuple(CauseView(c.id, c.title, c.detail, tuple(dict.fromkeys(e.where for e in c.evidence)))
                     for c in verdict.causes),
        path=tuple(StepView(s.question, s.answer, s.why, tuple(dict.fromkeys(e.where for e in s.evidence)))
                   for s in verdict.path),
        evidence=views)


def detection_claims(tl: Any) -> list[Claim]:
    return [Claim(f"{e.text}{f' ({e.node})' if e.node and e.node not in e.text else ''} at {hms(e.time)}",
                  tuple(e.sources))
            for e in tl.events if e.category == "detection"]


def done_claims(events: Sequence[Any]) -> list[Claim]:
    """What people noted and did, in order: the notes and the response events of the timeline."""
    return [Claim(f"{hms(e.time)} {e.text}", tuple(e.sources))
            for e in sorted(events, key=lambda e: e.time) if e.category in ("note", "response")]


def timeline_rows(events: Sequence[Any]) -> list[TimelineRow]:
    return [TimelineRow(hms(e.time) or "", day(e.time) or "", iso_z(e.time) or "", e.category, e.kind,
                        excerpt(e.text, ROW_TEXT), e.node, int(e.count or 1), hms(e.until) if e.until else None,
                        tuple(e.sources))
            for e in sorted(events, key=lambda e: e.time)]


def chart_view(chart: Chart, link: str | None) -> ChartView:
    series = tuple(SeriesView(s.label, s.kind, len(s.points), f"{s.first.value:.1f}% at {hms(s.first.time)}",
                              f"{s.peak.value:.1f}% at {hms(s.peak.time)}", f"{s.last.value:.1f}% at {hms(s.last.time)}",
                              tuple(dict.fromkeys((s.first.where, s.peak.where, s.last.where))))
                   for s in chart.series)
    if chart.svg is None:
        return ChartView(None, chart.note, series)
    if not link:
        return ChartView(None, chart.note + " (not written: the postmortem went to stdout)", series)
    return ChartView(link, chart.note, series, chart.legend)


def config_diff(verdict: Verdict, evidence: EvidenceSet) -> ConfigDiff:
    args = dict(verdict.facts.get("launch_args") or {})
    if verdict.facts.get("engine_version"):
        args["engine_version"] = verdict.facts["engine_version"]
    recs = [r for r in verdict.recommendations if r.to_value is not None]
    new = {r.setting: r.to_value for r in recs}
    diff: list[str] = []
    for key, value in args.items():
        if key in new and new[key] != value:
            diff += [f"-{key}: {value_text(value)}", f"+{key}: {value_text(new[key])}"]
        else:
            diff.append(f" {key}: {value_text(value)}")
    for r in recs:
        if r.setting not in args:
            diff += [f"-{r.setting}: {value_text(r.from_value)}", f"+{r.setting}: {value_text(r.to_value)}"]
    sources = tuple(dict.fromkeys(e.where for e in evidence.of(Kind.LAUNCH_CONFIG, Kind.ENGINE_VERSION)))
    return ConfigDiff(tuple(ConfigChange(r.setting, value_text(r.from_value), value_text(r.to_value), r.basis, r.why) for r in recs),
                      tuple(diff), verdict.command, sources[:4])


def value_text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "(unset)" if value is None else str(value)
