"""Incident bundle -> the template context: verdict, timeline, audit log and notes, merged.

Nothing here reads a clock: the "generated" time is `now` when given, else the timeline's
resolution time, else incident.yaml `created`, else the last dated event. Every string that
reaches the context goes through `redact_output` (secrets and request prompts masked).
"""
from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Sequence

from ..errors import BadInput
from ..evidence.kinds import Kind
from ..model import EvidenceSet, Verdict
from ..redact import redact_output
from .audit_steps import AuditSteps, read_steps
from .chart import Chart, Marker, build_chart
from .lessons import NoteLine, derive_actions, derive_lessons
from .mermaid import gantt, omitted
from .sections import (CLASS_LABELS, chart_view, config_diff, detection_claims, done_claims, root_cause_view,
                       timeline_rows, value_text)
from .signals import (NODES_DOWN, earlier_signals, engine_budget, first_failure_per_node, impact_claims,
                      trigger_claims)
from .views import (
    DURATION_LABELS, MOMENT_LABELS, Claim, Context, Detection, DurationView, Impact, IncidentInfo, InputView,
    MomentView, Response, day, hms, iso_z, span, stamp,
)

MOMENTS = ("impact_start", "detected", "first_response", "mitigated", "resolved")
SPANS = {"ttd": ("impact_start", "detected"), "ttr": ("detected", "first_response"),
         "ttm": ("impact_start", "mitigated"), "total": ("impact_start", "resolved")}


@dataclasses.dataclass
class Inputs:
    """What the context is built from; tests build these in memory."""
    bundle: Path
    verdict: Verdict
    evidence: EvidenceSet
    timeline: Any                     # triage.timeline Timeline (duck-typed: see views and templates/README.md)
    meta: dict[str, Any]              # incident.yaml
    audit: AuditSteps


def load_inputs(incident: str | Path) -> Inputs:
    from ..evidence import load_evidence
    from ..api import classify_evidence as classify
    from ..timeline import build_timeline
    from ..timeline.incident import load_incident

    bundle = Path(incident)
    load_incident(bundle, strict=False)     # a missing directory: one clear error first (a broken incident.yaml is a problem listed)
    # A bundle with notes and an audit log but no evidence files still gets its postmortem: the
    # verdict is then `unknown` and names what to attach. Parsed once, for the verdict and the timeline.
    evidence = load_evidence([str(bundle)], require=False)
    timeline = build_timeline(bundle, evidence=evidence)   # refuses a bundle with nothing at all in it
    return Inputs(bundle, classify(evidence), evidence, timeline, read_meta(bundle), read_steps(bundle))


def read_meta(bundle: Path) -> dict[str, Any]:
    from ..bundle import read_incident

    try:
        return read_incident(bundle)[0]
    except BadInput:
        return {}                 # the timeline reports a broken incident.yaml


def build_context(src: Inputs, *, now: datetime | None = None, chart_link: str | None = None) -> tuple[Context, Chart]:
    """`chart_link`: where the chart will be, relative to the markdown (None: no chart file written)."""
    tl, verdict, evidence = src.timeline, src.verdict, src.evidence
    moments = {name: _moment(name, tl.moments.get(name)) for name in MOMENTS}
    durations = {name: _duration(name, tl.durations.get(name), moments[a], moments[b])
                 for name, (a, b) in SPANS.items()}
    notes = _notes(tl.events)
    said = [(hms(e.time), e.text, tuple(e.sources)) for e in tl.events if e.category == "note"]
    failed_nodes = list(dict.fromkeys(e.node for e in sorted(tl.events, key=lambda e: e.time)
                                      if e.category == "failure" and e.node))
    if _time(tl, "detected") is not None:
        sooner = earlier_signals(evidence, verdict, _time(tl, "detected"), "detection")
    else:
        sooner = earlier_signals(evidence, verdict, _time(tl, "impact_start"), "impact")
    steps = src.audit.steps
    problems = _problems(tl.problems, src.audit.problems)
    # nodes whose own evidence shows a failure; unnamed servers count once per failing log
    nodes_affected = len(failed_nodes) or len(first_failure_per_node(evidence)) or None
    impact = Impact(durations["total"], moments["impact_start"], moments["resolved"], nodes_affected, tl.fleet_size,
                    tuple(failed_nodes),
                    (("incident.yaml",) if tl.fleet_size else ()) + _node_sources(tl.events, failed_nodes),
                    tuple(impact_claims(evidence, said)), tuple(_added_nodes(tl, failed_nodes)))
    lessons = derive_lessons(verdict, evidence, tl.moments, tl.durations.get("ttd"), notes, steps, sooner, problems)
    root_cause = root_cause_view(verdict)
    chart = build_chart(evidence, [Marker(m.time, MOMENT_LABELS[m.name]) for m in tl.moments.values()
                                   if m is not None and m.time is not None and m.name in MOMENT_LABELS],
                        title=f"{tl.incident_id}: GPU memory and KV cache (UTC)", budget=engine_budget(evidence, verdict))
    generated, basis = _generated(now, tl, src.meta, evidence)
    ctx = Context(
        incident=_incident(src, tl),
        generated_at=generated, generated_basis=basis,
        date=moments["impact_start"].date or _created_day(src.meta) or "unknown",
        status=_status(moments["resolved"]),
        summary=tuple(_summary(verdict, moments, durations, impact, src.meta, evidence, said)),
        moments=moments, durations=durations, impact=impact,
        root_cause=root_cause,
        trigger=tuple(trigger_claims(evidence, verdict)),
        detection=Detection(moments["detected"], durations["ttd"], tuple(detection_claims(tl)), tuple(sooner)),
        response=Response(moments["first_response"], moments["mitigated"], moments["resolved"], durations["ttm"],
                          durations["ttr"], tuple(steps), tuple(done_claims(tl.events))),
        timeline=tuple(timeline_rows(tl.events)),
        mermaid=gantt(tl.incident_id, tl.moments, tl.events),
        mermaid_note=omitted(tl.events),
        chart=chart_view(chart, chart_link),
        lessons=lessons,
        action_items=tuple(derive_actions(verdict, evidence, sooner, lessons)),
        config=config_diff(verdict, evidence),
        evidence=root_cause.evidence,
        inputs=tuple(InputView(s.path, s.kind, s.records, s.time_note) for s in evidence.sources),
        missing=tuple(_missing(tl, src, chart)),
        problems=tuple(problems),
        facts={k: verdict.facts.get(k) for k in ("engine", "engine_version", "gpu_total_bytes", "launch_args")
               if verdict.facts.get(k) is not None},
    )
    return scrub(ctx), chart


# -- sections ---------------------------------------------------------------------------------

def _moment(name: str, m: Any) -> MomentView:
    if m is None:
        return MomentView(name, MOMENT_LABELS[name], None, None, None, "not in the evidence")
    computed = _moment(name, m.computed) if getattr(m, "computed", None) is not None else None
    return MomentView(name, MOMENT_LABELS[name], hms(m.time), day(m.time), iso_z(m.time), m.how,
                      (m.source,) if m.source else (), computed)


def _duration(name: str, value: timedelta | None, a: MomentView, b: MomentView) -> DurationView:
    return DurationView(name, DURATION_LABELS[name], f"{a.label} → {b.label}", span(value),
                        int(value.total_seconds()) if value is not None else None, a.sources + b.sources)


def _time(tl: Any, name: str) -> datetime | None:
    m = tl.moments.get(name)
    return m.time if m is not None else None


def _notes(events: Sequence[Any]) -> list[NoteLine]:
    """Notes and recorded actions: what people did and said (read for lessons and error rates)."""
    return [NoteLine(e.time, e.text, tuple(e.sources)) for e in events
            if e.category in ("note", "response", "recovery") and e.time is not None]


def _incident(src: Inputs, tl: Any) -> IncidentInfo:
    meta = src.meta
    links = meta.get("links") if isinstance(meta.get("links"), list) else []
    return IncidentInfo(id=str(tl.incident_id), title=str(tl.title or meta.get("title") or tl.incident_id),
                        severity=_str(meta.get("severity")), service=_str(meta.get("service")),
                        created=_str(meta.get("created")), links=tuple(str(x) for x in links),
                        path=src.bundle.resolve().name)     # not the checkout's path: the same everywhere


def _status(resolved: MomentView) -> str:
    if resolved.time:
        return f"Draft: incident resolved {resolved.date} {resolved.time} UTC; action items open"
    return "Draft: no resolution in the evidence (the incident may be ongoing)"


def _noted_nodes_down(notes: Sequence[tuple[str, str, tuple[str, ...]]]) -> tuple[str, tuple[str, ...]]:
    """`; 13 of 16 nodes down, as noted at 14:19:00` from the first note that counts them."""
    for t, text, sources in notes:
        m = NODES_DOWN.search(text)
        if m:
            return f"; {m.group(1)} of {m.group(2)} {m.group(3)} {m.group(4)}, as noted at {t}", sources
    return "", ()


def _summary(verdict: Verdict, moments: dict[str, MomentView], durations: dict[str, DurationView],
             impact: Impact, meta: dict[str, Any], evidence: EvidenceSet,
             tl_notes: Sequence[tuple[str, str, tuple[str, ...]]] = ()) -> list[Claim]:
    out = []
    start, end, total = moments["impact_start"], moments["resolved"], durations["total"]
    service = _str(meta.get("service"))
    n, fleet, added = impact.nodes_affected, impact.fleet_size, len(impact.nodes_added)
    of = f" of {service}" if service else ""
    if n and fleet and fleet > 1:
        who = f"{n - added} of {fleet} nodes{of}" + (f" (and {added} node{'s' if added > 1 else ''} added during "
                                                     "the incident)" if added else "")
    else:
        who = f"{n} nodes{of}" if n and n > 1 else f"the {service} server" if service else "the server"
    # Logs are often attached for a few nodes only: say so, and add what people counted.
    seen = " in the attached evidence" if n and n > 1 else ""
    noted, noted_src = _noted_nodes_down(tl_notes)
    if start.time and end.time:
        out.append(Claim(f"From {start.time} to {end.time} UTC on {start.date} ({total.text}), {who} failed with "
                         f"GPU out-of-memory errors{seen}{noted}", start.sources + end.sources + noted_src))
    elif start.time:
        out.append(Claim(f"From {start.time} UTC on {start.date}, {who} failed with GPU out-of-memory errors{seen}"
                         f"{noted}; the evidence holds no resolution", start.sources + noted_src))
    cls = verdict.oom_class.value
    out.append(Claim(f"Cause: {CLASS_LABELS.get(cls, cls)} (triage verdict `{cls}`, confidence "
                     f"{verdict.confidence:.2f}): {verdict.summary}", tuple(e.where for e in verdict.evidence)))
    ttd, ttm = durations["ttd"], durations["ttm"]
    if ttd.text or ttm.text:
        parts = [f"detected after {ttd.text}" if ttd.text else None,
                 f"mitigated after {ttm.text}" if ttm.text else None]
        text = "; ".join(p for p in parts if p)
        out.append(Claim(text[:1].upper() + text[1:], ttd.sources + ttm.sources))
    recs = [r for r in verdict.recommendations if r.to_value is not None]
    if recs:
        launch = evidence.last(Kind.LAUNCH_CONFIG)
        out.append(Claim("Fix: " + "; ".join(f"{r.setting} {value_text(r.from_value)} → {value_text(r.to_value)}" for r in recs),
                         (launch.where,) if launch else ()))
    return out


def _missing(tl: Any, src: Inputs, chart: Chart) -> list[str]:
    out = list(tl.missing)
    if not src.audit.present and not any("actions.jsonl" in m for m in out):
        out.append("actions.jsonl: no recovery steps were recorded (`triage recover --execute` writes them)")
    if chart.svg is None:
        out.append(f"chart: {chart.note}")
    if not src.meta and not any("incident.yaml" in m for m in out):
        out.append("incident.yaml: no id, title, service, severity or fleet size (the bundle directory name is used)")
    return list(dict.fromkeys(out))


def _problems(timeline_problems: Sequence[str], audit_problems: Sequence[str]) -> list[str]:
    """The timeline's problems plus the audit reader's, one line per file:line."""
    import re

    out = list(timeline_problems)
    seen = {m.group(1) for p in out for m in [re.match(r"(actions\.jsonl:\d+)", p)] if m}
    for p in audit_problems:
        m = re.match(r"(actions\.jsonl:\d+)", p)
        if not m or m.group(1) not in seen:
            out.append(p)
    return list(dict.fromkeys(out))


def _generated(now: datetime | None, tl: Any, meta: dict[str, Any], evidence: EvidenceSet) -> tuple[str, str]:
    if now is not None:
        return stamp(now) + " UTC", "--now value"
    resolved = _time(tl, "resolved")
    if resolved is not None:
        return stamp(resolved) + " UTC", "resolution time"
    if meta.get("created"):
        from ..timeref import parse_iso

        created = parse_iso(str(meta["created"]))
        return (stamp(created) + " UTC" if created else str(meta["created"])), "incident.yaml created time"
    times = [e.time for e in tl.events if e.time is not None] or [e.time for e in evidence if e.time]
    if times:
        return stamp(max(times)) + " UTC", "last dated event"
    return "unknown", "bundle holds no dated record"


def _added_nodes(tl: Any, nodes: Sequence[str]) -> list[str]:
    """Failing nodes whose first sign of life is a server starting after impact began: capacity
    added during the incident (a scale-out), not part of the fleet that failed first."""
    impact = _time(tl, "impact_start")
    if impact is None:
        return []
    out = []
    for node in nodes:
        first = min((e for e in tl.events if e.node == node), key=lambda e: e.time, default=None)
        if first is not None and first.kind in ("server_start", "startup_complete") and first.time >= impact:
            out.append(node)
    return out


def _node_sources(events: Sequence[Any], nodes: Sequence[str]) -> tuple[str, ...]:
    out = []
    for node in nodes:
        first = next((e for e in sorted(events, key=lambda e: e.time) if e.node == node and e.category == "failure"),
                     None) or next((e for e in events if e.node == node), None)
        if first is not None and first.sources:
            out.append(first.sources[0])
    return tuple(out)


def _created_day(meta: dict[str, Any]) -> str | None:
    created = meta.get("created")
    return str(created)[:10] if created else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


# -- redaction ----------------------------------------------------------------------------------

def scrub(value: Any) -> Any:
    """A copy with every string masked (secrets, request prompts): dataclasses, dicts, tuples, lists."""
    if isinstance(value, str):
        return redact_output(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.replace(value, **{f.name: scrub(getattr(value, f.name)) for f in dataclasses.fields(value)
                                             if f.init})
    if isinstance(value, dict):                # a secret-named key masks its value whatever it holds
        return {k: redact_output({k: v})[k] if isinstance(v, str) else scrub(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(scrub(v) for v in value)
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value
