"""Recovery steps from INCIDENT/actions.jsonl, paired start -> end, each citing its lines.

A line that is not a JSON object, or a record with a field of the wrong type, is reported with
its line number (and left out of the steps);
a broken hash chain is reported too, since the steps may then not be what was done.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from ..recovery.audit import FILENAME, verify
from ..redact import redact_output
from ..safejson import loads
from ..timeline.actions import ACTION_FIELDS
from ..timeline.fields import wrong_field
from ..timeref import parse_iso
from .views import RecoveryStep, hms, span

DETAIL_CHARS = 160


@dataclass
class AuditSteps:
    steps: list[RecoveryStep] = field(default_factory=list)
    records: list[tuple[int, dict[str, Any]]] = field(default_factory=list)   # (line, record)
    problems: list[str] = field(default_factory=list)
    present: bool = False


def read_steps(bundle: Path) -> AuditSteps:
    path = bundle / FILENAME if bundle.is_dir() else None
    out = AuditSteps()
    if path is None or not path.is_file():
        return out
    out.present = True
    raw = path.read_bytes()
    for n, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = loads(line.decode("utf-8"))      # bounded nesting; NaN / Infinity read as None
        except (UnicodeDecodeError, ValueError):
            record = None
        if not isinstance(record, dict):
            out.problems.append(f"{FILENAME}:{n}: not a JSON object (corrupt or truncated line); left out of "
                                "the recovery steps")
            continue
        wrong = wrong_field(record, ACTION_FIELDS)      # a field the steps below hash or format
        if wrong:
            out.problems.append(f"{FILENAME}:{n}: {wrong}; left out of the recovery steps")
            continue
        out.records.append((n, record))
    report = verify(path)
    for problem in report.problems:
        m = re.match(r"line (\d+): (.*)", problem)
        if m and "corrupt JSON" in m.group(2):
            continue                                  # already reported above, in our words
        out.problems.append(f"{FILENAME}:{m.group(1)}: audit chain: {m.group(2)}" if m else f"{FILENAME}: {problem}")
    out.steps = _pair(out.records)
    return out


def _pair(records: list[tuple[int, dict[str, Any]]]) -> list[RecoveryStep]:
    open_: dict[tuple, tuple[int, dict[str, Any]]] = {}
    done: list[tuple[int, dict[str, Any], tuple[int, dict[str, Any]] | None]] = []
    for n, rec in records:
        key = (rec.get("run_id"), rec.get("step"), rec.get("action"))
        if rec.get("phase") == "start":
            if key in open_:
                done.append((open_[key][0], open_[key][1], None))
            open_[key] = (n, rec)
        elif rec.get("phase") == "end":
            start = open_.pop(key, None)
            done.append((start[0], start[1], (n, rec)) if start else (n, rec, (n, rec)))
    done += [(n, rec, None) for n, rec in open_.values()]
    done.sort(key=lambda d: d[0])
    return [_step(i, start_n, start, end) for i, (start_n, start, end) in enumerate(done, 1)]


def _step(i: int, start_n: int, start: dict[str, Any], end: tuple[int, dict[str, Any]] | None) -> RecoveryStep:
    # An end record without its start (a lost or corrupt line): when it began is unknown.
    began = None if end is not None and end[1] is start else _time(start.get("time"))
    end_rec = end[1] if end else None
    ended = _time(end_rec.get("time")) if end_rec else None
    duration = end_rec.get("duration_s") if end_rec else None
    sources = (f"{FILENAME}:{start_n}",) + ((f"{FILENAME}:{end[0]}",) if end and end[0] != start_n else ())
    detail = _detail(start.get("args"), end_rec.get("output_tail") if end_rec else None)
    return RecoveryStep(
        n=i, step=str(redact_output(str(start.get("step") or start.get("action") or "?"))),
        action=str(redact_output(str(start.get("action") or "?"))),
        started=hms(began), ended=hms(ended),
        result=str(end_rec.get("result") or "ok") if end_rec else "no end record (interrupted or still running)",
        duration=_took(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool) else None,
        user=str(redact_output(str(start["user"]))) if start.get("user") else None,
        detail=detail, sources=sources)


def _detail(args: Any, output: Any) -> str:
    parts = []
    if isinstance(args, dict) and args:
        parts.append(", ".join(f"{k}={_compact(v)}" for k, v in sorted(redact_output(args).items())))
    elif args:
        parts.append(_compact(redact_output(args)))
    if isinstance(output, str) and output.strip():
        parts.append("output: " + redact_output(output.strip().splitlines()[-1]))
    text = "; ".join(parts)
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _time(value: Any) -> datetime | None:
    """RFC 3339 -> UTC; None for anything else, a year outside 1900-2999 included."""
    return parse_iso(value) if isinstance(value, str) else None


def _took(seconds: float) -> str | None:
    """0.2 s, 14.5 s, 2 min 20 s: a step's own duration keeps its tenths under a minute. None for
    a duration no step has (negative, or past a year: a damaged record)."""
    if not 0 <= seconds <= MAX_STEP_S:
        return None
    return f"{seconds:.1f} s" if seconds < 59.95 else span(timedelta(seconds=seconds)) or ""


MAX_STEP_S = 366 * 86400
