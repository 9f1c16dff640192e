"""`build_timeline(INCIDENT)`: every source of a bundle -> one ordered, merged timeline."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..bundle import RELAUNCH_DIR
from ..errors import BadInput
from ..model import EvidenceSet
from ..redact import redact_output
from .actions import read_actions
from .from_evidence import from_evidence
from .handoffs import close_handoffs
from .incident import IncidentInfo, load_incident
from .merge import merge
from .model import Timeline
from .moments import compute
from .notes import FILENAME as NOTES, Note, read_notes
from .raw import Raw

# parser name -> what its absence costs the timeline
_EXPECTED_SOURCES = (
    ("log", "no server logs (logs/) — OOM, engine death and restart times unknown"),
    ("prometheus", "no /metrics scrapes (metrics/) — no KV-usage or queue series"),
    ("nvidia_smi", "no nvidia-smi readings (gpu/) — no GPU memory series, no discrepancy check"),
    ("kubernetes", "no Kubernetes pod status or events (k8s/) — pod restarts not shown"),
)


def build_timeline(incident: str | Path, *, evidence: EvidenceSet | None = None) -> Timeline:
    """`evidence`: the bundle's records when the caller already loaded them (the postmortem
    classifies the same records): the bundle is then not parsed a second time."""
    info = load_incident(incident, strict=False)     # a broken incident.yaml is a problem listed, not the end
    evidence = _evidence(info, evidence)
    found = from_evidence(evidence)
    notes, note_problems = read_notes(info.path)
    action_raws, action_problems, has_actions = read_actions(info.path)
    has_notes = (info.path / NOTES).exists()
    if not any(s.error is None for s in evidence.sources) and not has_notes and not has_actions:
        raise BadInput(str(incident), "nothing to build a timeline from: no evidence files, notes.jsonl or "
                                      "actions.jsonl")
    for i, r in enumerate(action_raws):   # at equal times: evidence, then notes, then recovery steps
        r.order = 2 * 10**12 + i
    open_handoffs = close_handoffs(action_raws, notes)
    raws = found.raws + [_note_raw(n) for n in notes] + action_raws
    _lifecycle(raws)
    # Masked once the rows are merged (a few rows, not every raw line) and before anything reads or
    # cuts their text (a cut secret would no longer be recognised): moments quote these texts.
    events = [replace(e, text=redact_output(e.text), node=redact_output(e.node) if e.node else e.node)
              for e in merge(raws)]
    kinds = {s.kind for s in evidence.sources if s.records}
    result = compute(events, found.alerts, notes, info, has_alert_files="alertmanager" in kinds,
                     alerts_dir=(info.path / "alerts").is_dir())
    missing = _missing(info, kinds, has_notes, has_actions) + result.missing + open_handoffs
    # A skipped README or rendered postmortem is no problem of the timeline; a damaged log is.
    skipped = [w for w in evidence.warnings if not w.endswith("(not an evidence file)")]
    problems = info.problems + skipped + found.problems + note_problems + action_problems + result.problems
    problems = list(dict.fromkeys(problems))   # a skipped incident.yaml is seen by both readers
    # Every export (table, --json, --csv, the postmortem) starts from this object: nothing unmasked leaves it.
    return Timeline(
        incident_id=redact_output(info.id),
        title=redact_output(info.title) if info.title else info.title,
        events=events,
        moments={k: replace(m, how=redact_output(m.how)) for k, m in result.moments.items()},
        durations=result.durations,
        nodes=sorted({e.node for e in events if e.node}),
        fleet_size=info.fleet_size,
        problems=[redact_output(p) for p in problems],
        missing=missing,
        time_note=next((s.time_note for s in evidence.sources if s.time_note), None),
    )


def _evidence(info: IncidentInfo, loaded: EvidenceSet | None = None) -> EvidenceSet:
    from ..evidence import load_evidence

    if not any(p.is_file() for p in info.path.rglob("*")):
        raise BadInput(str(info.path), "the incident directory is empty")
    if loaded is None:
        evidence = load_evidence([str(info.path)], require=False)
    else:       # a copy: the caller's set (what was classified) must not gain the relaunch logs
        evidence = EvidenceSet(list(loaded.items), list(loaded.sources), list(loaded.warnings))
    relaunched = info.path / RELAUNCH_DIR
    if relaunched.is_dir() and any(p.is_file() for p in relaunched.rglob("*")):
        # The classifier leaves these out (what happened after the incident must not change its
        # diagnosis); the timeline wants them: the relaunched server starting, or failing again.
        extra = load_evidence([str(relaunched)], tz=info.tz_name, require=False)
        prefix = f"{RELAUNCH_DIR}/"
        evidence.items.extend(replace(e, source=prefix + e.source) for e in extra.items)
        evidence.sources.extend(replace(s, path=prefix + s.path) for s in extra.sources)
        evidence.warnings.extend(prefix + w for w in extra.warnings)
    return evidence


def _note_raw(note: Note) -> Raw:
    if note.automated:
        # A warning `triage watch` (or another of our own monitors) wrote: a signal, not a person
        # responding, so it never sets the first response.
        return Raw(note.time, "monitor_warning", "signal", note.text, note.source, NOTES, None, key=note.source,
                   order=10**12 + note.line)
    return Raw(note.time, "note", "note", note.text, note.source, NOTES, None, key=note.source, order=10**12 + note.line)


def _lifecycle(raws: list[Raw]) -> None:
    """Start-up lines: a restart when the node failed before, recovery once the incident began."""
    failures = sorted(r.time for r in raws if r.category == "failure")
    impact = failures[0] if failures else None
    first_failure: dict[str | None, object] = {}
    for r in sorted((r for r in raws if r.category == "failure"), key=lambda r: r.time):
        first_failure.setdefault(r.node, r.time)
    for r in raws:
        if r.category != "lifecycle":
            continue
        failed = first_failure.get(r.node)
        if r.kind == "server_start" and failed is not None and failed <= r.time:
            r.kind = "restart"
        r.category = "recovery" if impact is not None and r.time >= impact else "signal"


def _missing(info: IncidentInfo, kinds: set[str], has_notes: bool, has_actions: bool) -> list[str]:
    out = []
    if not info.has_yaml:
        out.append("no incident.yaml — title and date unknown; zone-less times read as UTC")
    out += [why for kind, why in _EXPECTED_SOURCES if kind not in kinds]
    if not has_notes:
        out.append("no notes.jsonl — nothing people noted (add with `triage note INCIDENT \"...\" --at 14:19`)")
    if not has_actions:
        out.append("no actions.jsonl — no recovery steps recorded by `triage recover --execute`")
    return out
