"""`INCIDENT/actions.jsonl` (the recovery audit log) -> one timeline event per recovery step.

A step writes a start and an end record; the event spans them (time = start, until = end). A
deep health check that passed (`wait_healthy`, `verify`) is recovery evidence: the first one
after the last failure marks the incident mitigated. The hash chain is checked with the audit
module's own verifier, so an edited or truncated line is reported with its line number.
"""
from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..recovery.handoff import HANDED
from ..redact import redact_output
from ..safefile import kind_at
from ..safejson import loads
from ..timeref import parse_iso
from .fields import spec, wrong_field
from .raw import Raw

if TYPE_CHECKING:                  # recovery loads only when a bundle has an audit log
    from ..recovery.audit import VerifyReport
    from ..recovery.hostkey import HostKey

FILENAME = "actions.jsonl"
# A proof under the incident's peak load that held is the strongest health check there is.
HEALTH_ACTIONS = frozenset({"wait_healthy", "verify", "health_check", "deep_health_check", "prove"})
# Every field the timeline and the postmortem read from a record, with the types recovery writes.
# The hash chain's own fields (seq, prev, hash, mac) are read only by the audit verifier.
ACTION_FIELDS = spec(time="string", run_id="string null", step="string null", action="string null",
                     phase="string null", result="string null", duration_s="number null", user="string null",
                     node="string null", output_tail="string null", args="object null")


def read_actions(incident: str | Path) -> tuple[list[Raw], list[str], bool]:
    """(events, problems, file present)."""
    path = Path(incident) / FILENAME
    if not path.exists():
        return [], [], False
    found = kind_at(path)
    if found is not None:          # a FIFO would block the readers below
        return [], [f"{FILENAME}: {found}, not a regular file; skipped"], True
    from ..recovery.audit import verify

    report = verify(path, key=_host_key())     # one pass: the chain, and who wrote each record
    problems = [_cite(p) for p in report.problems]
    try:
        lines = path.read_bytes().split(b"\n")
    except OSError as exc:
        return [], [f"{FILENAME}: cannot read: {exc.strerror or exc}"], True
    records: list[tuple[int, dict[str, Any]]] = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            obj = loads(raw.decode("utf-8"))      # bounded nesting; NaN / Infinity read as None
        except (UnicodeDecodeError, ValueError):
            continue                      # verify() reported it with its line number
        if isinstance(obj, dict):
            problem = record_problem(obj)
            if problem:
                problems.append(f"{FILENAME}:{n}: {problem}; step left out of the timeline")
                continue
            records.append((n, obj))
    problems.extend(_unauthenticated(report))
    return _steps(records, problems), problems, True


def record_problem(rec: dict[str, Any]) -> str | None:
    """Why a record cannot be read as a step (a field of the wrong type, no usable time), or None."""
    wrong = wrong_field(rec, ACTION_FIELDS)
    if wrong:
        return wrong
    return None if _time(rec) is not None else "no valid 'time'"


def _host_key() -> HostKey | None:
    """This host's audit key, or None where it has none (or an unusable one): a timeline is often
    read on another machine, where there is nothing to check the records against."""
    from ..errors import TriageError
    from ..recovery.hostkey import load_key

    try:
        return load_key()
    except (TriageError, OSError):
        return None


def _unauthenticated(report: VerifyReport) -> list[str]:
    """Name the records this host's key does not authenticate: anyone who can write the bundle can
    add steps, so the reader is told which ones recovery itself would not trust."""
    if report.key_id is None or not report.untrusted:
        return []
    lines = [u.partition(":")[0].removeprefix("line ") for u in report.untrusted]
    shown = ", ".join(lines[:10]) + (f" and {len(lines) - 10} more" if len(lines) > 10 else "")
    return [f"{FILENAME}: line(s) {shown} not authenticated by this host's key (written on another host, "
            "by hand, or forged); recovery does not trust them"]


def _cite(problem: str) -> str:
    """audit.verify's `line 3: ...` -> `actions.jsonl:3: ...`."""
    if problem.startswith("line "):
        number, _, rest = problem[5:].partition(":")
        if number.isdigit():
            return f"{FILENAME}:{number}:{rest}"
    return f"{FILENAME}: {problem}"


def _steps(records: list[tuple[int, dict[str, Any]]], problems: list[str]) -> list[Raw]:
    out: list[Raw] = []
    open_steps: dict[tuple, tuple[int, dict[str, Any]]] = {}
    last_time: datetime | None = None
    for n, rec in records:
        when = _time(rec)
        assert when is not None
        if last_time is not None and when < last_time:
            problems.append(f"{FILENAME}:{n}: time {rec.get('time')} is before the record above it")
        last_time = max(when, last_time) if last_time else when
        key = (rec.get("run_id"), rec.get("step"), rec.get("action"))
        if rec.get("phase") == "start":
            if key in open_steps:
                problems.append(f"{FILENAME}:{open_steps[key][0]}: step {key[1]!r} started again at line {n} "
                                "without an end record")
                out.append(_event(*open_steps[key], None, None))
            open_steps[key] = (n, rec)
        elif rec.get("phase") == "end":
            start = open_steps.pop(key, None)
            if start is None:
                problems.append(f"{FILENAME}:{n}: end of step {key[1]!r} without a start record")
                out.append(_event(n, rec, None, None))
                continue
            if when < (_time(start[1]) or when):
                problems.append(f"{FILENAME}:{n}: step {key[1]!r} ends ({rec.get('time')}) before it started "
                                f"({start[1].get('time')}, line {start[0]})")
            out.append(_event(start[0], start[1], n, rec))
        else:
            out.append(_event(n, rec, None, None))
    for n, rec in open_steps.values():
        problems.append(f"{FILENAME}:{n}: step {rec.get('step')!r} has no end record (interrupted, or still running)")
        out.append(_event(n, rec, None, None))
    return out


def _event(n: int, rec: dict[str, Any], end_n: int | None, end: dict[str, Any] | None) -> Raw:
    action = str(rec.get("action") or "?")
    step = rec.get("step") or action
    result = (end or {}).get("result") if end is not None else None
    if end is None and rec.get("phase") == "end":
        end, result = rec, rec.get("result")
    health = action in HEALTH_ACTIONS
    if health and result == "ok":
        kind, category = "health_check_passed", "recovery"
    elif health and result is not None:
        kind, category = "health_check_failed", "response"
    else:
        kind, category = "action", "response"
    handed = result == HANDED
    if handed:                      # not done: a person has it (closed by a note, build.py)
        text = f"recovery step {step!r} ({action}): handed to a person, open until a note says it is done"
    else:
        text = f"recovery step {step!r} ({action}): {result or 'no end record'}"
        duration = (end or {}).get("duration_s")
        if isinstance(duration, (int, float)):
            text += f" after {duration:.1f} s"
    if rec.get("user"):
        text += f" by {rec['user']}"
    data = (end or {}).get("data")
    instruction = data.get("instruction") if handed and isinstance(data, dict) else None
    detail = redact_output(" ".join(instruction.split()))[:200] if isinstance(instruction, str) \
        else _last_line((end or {}).get("output_tail"))
    if detail:
        text += f" — {detail}"
    sources = [f"{FILENAME}:{n}"] + ([f"{FILENAME}:{end_n}"] if end_n else [])
    return Raw(_time(rec), kind, category, redact_output(text), sources[0], FILENAME, _node(rec),
               key=f"{rec.get('run_id')}|{step}|{n}",
               until=None if handed else _time(end) if end is not None and end is not rec else None,
               extra_sources=tuple(sources[1:]), handoff=str(step) if handed else None)


def _node(rec: dict[str, Any]) -> str | None:
    args = rec.get("args") if isinstance(rec.get("args"), dict) else {}
    value = rec.get("node") or args.get("node")
    return str(value) if value else None


def _time(rec: dict[str, Any] | None) -> datetime | None:
    value = (rec or {}).get("time")
    return parse_iso(value) if isinstance(value, str) else None


def _last_line(text: Any) -> str:
    if not isinstance(text, str):
        return ""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    # Masked before it is cut: a secret cut in half is no longer recognisable as one.
    return redact_output(lines[-1])[:200] if lines else ""
