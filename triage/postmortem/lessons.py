"""Lessons (went well / went wrong / got lucky) and action items, drawn from evidence and notes.

Each lesson is a rule over what the bundle holds, never a stock phrase: it is stated only when
its facts are there, and it cites them. People add their own through notes: a note starting
with `well:`, `wrong:` (or `badly:`) or `lucky:` is listed under that heading.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Sequence

from ..evidence.kinds import Kind
from ..model import EvidenceSet, Verdict
from .signals import failures, who
from .views import ActionItem, Claim, EarlierSignal, Lessons, RecoveryStep, hms, span

_ENGINES = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI"}
OWNER = "TBD"
DUE = "TBD"
FAST_DETECTION = timedelta(minutes=5)
SLOW_DETECTION = timedelta(minutes=15)
WARM_UP = 600.0                    # a server failing this soon after start failed on warm-up traffic
_SCALE = re.compile(r"(?:^|(?<=[.;]))(?:(?!\bscal(?:e|ed|es|ing)\b)[^.;])*\bscal(?:e|ed|es|ing)\b[^.;]*?"
                    r"(?:\bout\b|\bup\b|\breplicas?\b|(?<!\d)\d+\s*(?:→|->|to)\s*\d+)", re.I)
_TAGS = (("went_well", re.compile(r"^\s*(?:went\s+)?well\s*:\s*", re.I)),
         ("went_wrong", re.compile(r"^\s*(?:went\s+)?(?:wrong|badly|bad)\s*:\s*", re.I)),
         ("lucky", re.compile(r"^\s*(?:got\s+)?lucky\s*:\s*", re.I)))


@dataclass(frozen=True)
class NoteLine:
    """A human note or a recorded action, as the timeline holds it."""
    time: datetime
    text: str
    sources: tuple[str, ...]


def derive_lessons(verdict: Verdict, evidence: EvidenceSet, moments: dict[str, Any], ttd: timedelta | None,
                   notes: Sequence[NoteLine], steps: Sequence[RecoveryStep], sooner: Sequence[EarlierSignal],
                   problems: Sequence[str]) -> Lessons:
    well: list[Claim] = []
    wrong: list[Claim] = []
    lucky: list[Claim] = []
    detected = moments.get("detected")
    if detected is not None and detected.time is not None and ttd is not None:
        via_alert = "alert" in (detected.how or "").lower()
        if via_alert and ttd <= FAST_DETECTION:
            well.append(Claim(f"Alerting caught it: {detected.how} {span(ttd)} after impact began",
                              _src(detected.source)))
        elif ttd > SLOW_DETECTION or not via_alert:
            wrong.append(Claim(f"Detection took {span(ttd)} ({detected.how})", _src(detected.source)))
    done = [s for s in steps if s.result in ("ok", "skipped")]
    if steps and len(done) == len(steps):
        skipped = sum(1 for s in steps if s.result == "skipped")
        well.append(Claim(f"All {len(steps)} recorded recovery steps completed"
                          + (f" ({skipped} skipped)" if skipped else ""), _all_sources(steps)))
    checks = [s for s in done if s.action in ("wait_healthy", "verify")]
    if checks:
        well.append(Claim("Recovery was verified, not assumed: " + ", ".join(f"{s.step} ({s.action})" for s in checks)
                          + " passed", _all_sources(checks)))
    for s in steps:
        if s.result not in ("ok", "skipped"):
            wrong.append(Claim(f"Recovery step {s.step} ({s.action}) ended {s.result}", s.sources))
    scale = _scale_out(evidence, notes, moments)
    if scale:
        wrong.append(scale)
    for cause in verdict.causes:
        cited = tuple(e.where for e in cause.evidence)
        if cause.id == "accounting_discrepancy":
            wrong.append(Claim(f"The engine's own numbers hid the problem: {cause.title}", cited))
        elif cause.id == "known_engine_bug":
            wrong.append(Claim(f"Production ran an engine version with a known memory bug: {cause.title}", cited))
            fixed = re.search(r"fixed in ([\w.\-]+)", cause.detail or "")
            if fixed:
                lucky.append(Claim(f"A release with the fix ({fixed.group(1).rstrip('.;,')}) already existed", cited))
    if sooner:
        first = sooner[0]
        wrong.append(Claim(f"Warning signs were in the data {first.lead or 'before detection'} and paged no one: "
                           + "; ".join(s.signal for s in sooner), tuple(x for s in sooner for x in s.sources)))
    damaged = [p for p in problems if p.startswith("actions.jsonl")]
    if damaged:       # one lesson, not one per line: the lines are listed under the bundle's problems
        first = damaged[0]
        more = f" (and {len(damaged) - 1} more problem{'s' if len(damaged) > 2 else ''}, listed in the appendix)" \
            if len(damaged) > 1 else ""
        wrong.append(Claim(f"The recovery audit log is damaged: {first}{more}",
                           tuple(dict.fromkeys(p.split(": ")[0] for p in damaged))))
    tagged = _tagged(notes)
    return Lessons(tuple(well + tagged["went_well"]), tuple(wrong + tagged["went_wrong"]),
                   tuple(lucky + tagged["lucky"]))


def _scale_out(evidence: EvidenceSet, notes: Sequence[NoteLine], moments: dict[str, Any]) -> Claim | None:
    """Capacity added before the cause was known (before mitigation): the write-ups' classic wrong turn."""
    mitigated = moments.get("mitigated")
    limit = mitigated.time if mitigated is not None and mitigated.time else None
    hit = next((n for n in sorted(notes, key=lambda n: n.time) if _SCALE.search(n.text)
                and (limit is None or n.time < limit)), None)
    if hit is None:
        return None
    fresh = [f for f in failures(evidence) if f.time > hit.time and isinstance(f.fields.get("uptime_s"), (int, float))
             and f.fields["uptime_s"] <= WARM_UP]
    text = f"Scaling out before diagnosing: \u201c{hit.text}\u201d at {hms(hit.time)}"
    if fresh:
        f = fresh[0]
        text += (f"; the new capacity failed the same way right after warm-up ({who(f)} "
                 f"{span(timedelta(seconds=f.fields['uptime_s']))} after start): more servers cannot help when "
                 "each one runs out of memory on its own")
    return Claim(text, hit.sources + tuple(f.where for f in fresh[:2]))


def _tagged(notes: Sequence[NoteLine]) -> dict[str, list[Claim]]:
    out: dict[str, list[Claim]] = {"went_well": [], "went_wrong": [], "lucky": []}
    for note in notes:
        for key, pattern in _TAGS:
            m = pattern.match(note.text)
            if m:
                out[key].append(Claim(note.text[m.end():].strip(), note.sources))
                break
    return out


# -- action items -----------------------------------------------------------------------------

def derive_actions(verdict: Verdict, evidence: EvidenceSet, sooner: Sequence[EarlierSignal],
                   lessons: Lessons) -> list[ActionItem]:
    items: list[tuple[str, str, str, str, tuple[str, ...]]] = []   # title, kind, priority, why, sources
    launch = evidence.last(Kind.LAUNCH_CONFIG)
    launch_src = (launch.where,) if launch else ()
    for r in verdict.recommendations:
        if r.to_value is None:
            continue
        if r.setting == "engine_version":
            engine = _ENGINES.get(str(verdict.facts.get("engine")), "the engine")
            items.append((f"Upgrade {engine} {r.from_value} → {r.to_value}",
                          "prevent", "P1", r.why, _version_sources(evidence)))
        else:
            name = f"{r.setting} (environment)" if r.env else r.setting
            items.append((f"Set {name} {_v(r.from_value)} → {_v(r.to_value)}", "mitigate",
                          "P1" if r.basis == "incident" else "P2",
                          f"{r.why} (basis: {r.basis.replace('_', ' ')})", launch_src))
    seen = set()
    for s in sooner:
        if s.alert not in seen:
            seen.add(s.alert)
            items.append((f"Add alert — {s.alert}", "detect", "P2",
                          f"it would have fired at {s.time}, {s.lead or 'before detection'}", s.sources))
    if any(c.text.startswith("Scaling out before diagnosing") for c in lessons.went_wrong):
        hit = next(c for c in lessons.went_wrong if c.text.startswith("Scaling out before diagnosing"))
        items.append(("Runbook: classify the OOM (`triage classify`) before adding capacity", "process", "P2",
                      "scaling out does not help when every server runs out of memory on its own", hit.sources))
    if any(c.id == "known_engine_bug" for c in verdict.causes):
        bug = next(c for c in verdict.causes if c.id == "known_engine_bug")
        items.append(("Pin the engine version; soak-test each new version for GPU memory at production context "
                      "lengths before rollout", "prevent", "P2", bug.title, tuple(e.where for e in bug.evidence)))
    for what in verdict.attach:
        items.append((f"Attach to the incident bundle: {what}", "investigate", "P3",
                      "the verdict could not settle without it", ()))
    return [ActionItem(n, title, kind, prio, OWNER, DUE, why, src)
            for n, (title, kind, prio, why, src) in enumerate(items, 1)]


def _version_sources(evidence: EvidenceSet) -> tuple[str, ...]:
    rec = evidence.first(Kind.ENGINE_VERSION)
    return (rec.where,) if rec else ()


def _v(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "(unset)" if value is None else str(value)


def _src(source: str | None) -> tuple[str, ...]:
    return (source,) if source else ()


def _all_sources(steps: Sequence[RecoveryStep]) -> tuple[str, ...]:
    return tuple(src for s in steps for src in s.sources[:1])
