"""Verdict -> the stable `triage.verdict/v1` JSON object (evidence indexed, times in UTC).

The object is an output: its text is masked (`triage.redact.redact_output`), so the new `command`
reads `--api-key ***`. The Verdict itself keeps the real values for recovery to relaunch with.
"""
from __future__ import annotations

from typing import Any

from .model import Evidence, Verdict
from .redact import redact_output

SCHEMA_ID = "triage.verdict/v1"


def to_json(verdict: Verdict) -> dict[str, Any]:
    index: dict[Any, int] = {}
    table: list[dict[str, Any]] = []

    def ref(items) -> list[int]:
        out = []
        for e in items:
            key = same_fact(e)
            if key not in index:
                index[key] = len(table)
                table.append(_evidence(e))
            if index[key] not in out:
                out.append(index[key])
        return out

    path = [{"question": s.question, "answer": s.answer, "why": s.why, "evidence": ref(s.evidence)}
            for s in verdict.path]
    summary_refs = ref(verdict.evidence)
    causes = [{"id": c.id, "title": c.title, **({"detail": c.detail} if c.detail else {}), "evidence": ref(c.evidence)}
              for c in verdict.causes]
    return redact_output({
        "schema": SCHEMA_ID,
        "verdict": {"class": verdict.oom_class.value, "confidence": round(float(verdict.confidence), 2),
                    "summary": verdict.summary, "evidence": summary_refs},
        "causes": causes,
        "path": path,
        "evidence": table,
        "facts": _clean(verdict.facts),
        "recommendations": [
            {"setting": r.setting, "from": _clean(r.from_value), "to": _clean(r.to_value), "why": r.why,
             "basis": r.basis, **({"env": True} if r.env else {}), **({"manual": True} if r.manual else {})}
            for r in verdict.recommendations],
        "command": verdict.command,
        "runbook": verdict.runbook,
        "attach": list(verdict.attach),
    })


def same_fact(e: Evidence) -> tuple:
    """One citation per fact: a message repeated by the same source (vLLM logs an exception,
    then Python prints it again unprefixed) is cited once, at its first line."""
    return (e.source, e.kind, e.text[:240])


def _evidence(e: Evidence) -> dict[str, Any]:
    return {"source": e.source, "line": e.line, "time": iso(e.time), "kind": e.kind, "text": e.text}


def iso(t) -> str | None:
    return t.isoformat().replace("+00:00", "Z") if t is not None else None


def _clean(value: Any) -> Any:
    """JSON-safe copy (tuples -> lists, datetimes -> ISO strings)."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "isoformat"):
        return iso(value)
    if isinstance(value, float) and value != value:  # NaN
        return None
    return value
