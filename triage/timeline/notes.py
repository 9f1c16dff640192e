"""`INCIDENT/notes.jsonl`: what people noted during and after the incident (`triage note`).

One JSON object per line:
  time         when it happened, UTC RFC 3339 (`--at`, else when it was recorded)
  recorded_at  when the note was written
  author       who wrote it
  text         what happened (secrets masked)
  at_given     the `--at` value as typed (back-dated notes only), with `at_note` saying how it was read
  moment       optional: this note sets a key moment by hand (impact_start, detected, ...)

Lines are appended with one write on an O_APPEND descriptor and fsync'd, so concurrent notes
never interleave and a crash never leaves half a line behind a complete one.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ..errors import BadInput
from ..redact import redact_output
from ..safefile import NotRegular, open_append, read_regular
from ..safejson import loads
from ..timeref import MAX_YEAR, MIN_YEAR, parse_iso
from .fields import spec, wrong_field
from .incident import IncidentInfo, load_incident
from .model import MOMENT_NAMES

FILENAME = "notes.jsonl"
MAX_TEXT = 4000
FUTURE_SLACK = timedelta(seconds=60)     # clocks drift; a note a few seconds ahead is not "the future"
_BARE = re.compile(r"^(?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2}))?$")
_MARKER = re.compile(r"(?<![\w#])#(" + "|".join(MOMENT_NAMES) + r")\b")


@dataclass(frozen=True)
class At:
    time: datetime        # UTC
    given: str            # as typed
    note: str             # how it was read: the date and zone used


def resolve_at(given: str, incident: IncidentInfo, now: datetime) -> At:
    """`14:19`, `14:19:30`, `2026-03-12 14:19`, or ISO 8601 with `Z` / an offset -> UTC.

    A bare time is the occurrence of that clock time nearest the moment the incident was opened
    (incident.yaml `created`, in its zone): on its date, or the day after / before when that is
    more than 12 h away (a note just after midnight; an impact that began before midnight of an
    incident opened just after it). Without `created` it is today. A time in the future is refused.
    """
    text = given.strip()
    bare = _BARE.match(text)
    if bare:
        h, m, s = int(bare["h"]), int(bare["m"]), int(bare["s"] or 0)
        if h > 23 or m > 59 or s > 59:
            raise BadInput("--at", f"{given!r} is not a time of day")
        if incident.created is not None:
            base = incident.created.astimezone(incident.tz)
            why = "the incident's date, from incident.yaml created"
        else:
            base = now.astimezone(incident.tz)
            why = "today: no incident date (incident.yaml created)"
        local = datetime(base.year, base.month, base.day, h, m, s, tzinfo=incident.tz)
        if incident.created is not None and local < incident.created - timedelta(hours=12):
            local += timedelta(days=1)
            why = "the day after the incident's date: the time is past midnight"
        elif incident.created is not None and local > incident.created + timedelta(hours=12):
            local -= timedelta(days=1)
            why = "the day before the incident's date: the time is before midnight"
        when = local.astimezone(timezone.utc)
        note = f"{text} read on {local:%Y-%m-%d}, {why}; zone {incident.tz_note}"
    else:
        when, note = _full(text, incident, given)
    if when > now + FUTURE_SLACK:
        raise BadInput("--at", f"{given!r} is {_z(when)}, in the future (now {_z(now)})")
    return At(when, given, note)


def _full(text: str, incident: IncidentInfo, given: str) -> tuple[datetime, str]:
    iso = text.replace(" ", "T", 1) if re.match(r"^\d{4}-\d{2}-\d{2} \d", text) else text
    if iso.endswith(("Z", "z")):
        iso = iso[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(iso)
    except ValueError:
        raise BadInput("--at", f"{given!r} is not a time (use 14:19, 14:19:30, 2026-03-12 14:19 or "
                               "2026-03-12T14:19:00Z)") from None
    if "T" not in iso and len(iso) <= 10:
        raise BadInput("--at", f"{given!r} has no time of day (use 2026-03-12 14:19)")
    if not MIN_YEAR <= parsed.year <= MAX_YEAR:     # and the zone arithmetic below cannot overflow
        raise BadInput("--at", f"{given!r} is not a time from {MIN_YEAR} to {MAX_YEAR}")
    if parsed.tzinfo is None:
        local = parsed.replace(tzinfo=incident.tz)
        return local.astimezone(timezone.utc), f"{text} read in zone {incident.tz_note}"
    return parsed.astimezone(timezone.utc), f"{text}: offset given"


def append_note(incident: str | Path, text: str, *, at: str | None = None, moment: str | None = None,
                author: str | None = None, now: datetime | None = None) -> dict[str, Any]:
    """Append one note and return it as written."""
    from ..recovery.audit import current_user
    from ..timestamps import rfc3339

    info = load_incident(incident, strict=False)
    if info.yaml_error and at is not None:      # --at needs the incident's date and zone
        raise BadInput("--at", f"cannot be read without the incident's date and zone: {info.yaml_error}")
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc)
    body = " ".join(text.split()) if text else ""
    if not body:
        raise BadInput("note", "the note text is empty")
    if len(body) > MAX_TEXT:
        raise BadInput("note", f"the note is {len(body)} characters; keep it under {MAX_TEXT}")
    if moment is not None and moment not in MOMENT_NAMES:
        raise BadInput("--moment", f"unknown moment {moment!r} (one of {', '.join(MOMENT_NAMES)})")
    record: dict[str, Any] = {"time": rfc3339(now), "recorded_at": rfc3339(now),
                              "author": author or current_user(), "text": redact_output(body)}
    if at is not None:
        resolved = resolve_at(at, info, now)
        record.update(time=rfc3339(resolved.time), at_given=resolved.given, at_note=resolved.note)
    if moment:
        record["moment"] = moment
    _append_line(info.path / FILENAME, json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
    return record


def _append_line(path: Path, line: str) -> None:
    data = line.encode("utf-8")
    # Never through a symlink or a hard link (the bundle's writer may have planted one to make a
    # root `triage note` append to another file), never blocking on a FIFO.
    fd, created = open_append(path)
    try:
        if os.write(fd, data) != len(data):     # one write: concurrent notes never interleave
            raise BadInput(str(path), "short write; the last line may be incomplete")
        os.fsync(fd)
    except OSError as exc:
        raise BadInput(str(path), f"cannot write: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- reading ------------------------------------------------------------------------------------

# Every field read from a note, with the types `triage note` writes: a note with another type in one
# of them is reported and skipped, not half read.
NOTE_FIELDS = spec(time="string", text="string", recorded_at="string null", author="string null",
                   moment="string null")

# Authors of the notes our own tools write (`triage watch --incident`, `triage serve` closing an
# incident): signals, not a person responding.
WATCH_AUTHOR = "triage watch"
SERVE_AUTHOR = "triage serve"
MONITOR_AUTHORS = frozenset({WATCH_AUTHOR, SERVE_AUTHOR})


@dataclass(frozen=True)
class Note:
    line: int
    time: datetime
    text: str
    author: str | None
    recorded_at: datetime | None
    moment: str | None            # set by the `moment` field or a `#resolved`-style marker in the text

    @property
    def source(self) -> str:
        return f"{FILENAME}:{self.line}"

    @property
    def automated(self) -> bool:
        """Written by one of our own monitors (`triage watch`), not by a person."""
        return self.author in MONITOR_AUTHORS


def read_notes(incident: str | Path) -> tuple[list[Note], list[str]]:
    """Every valid note, and one problem per bad line (`notes.jsonl:3: not JSON`)."""
    path = Path(incident) / FILENAME
    notes: list[Note] = []
    problems: list[str] = []
    try:
        raw_lines = read_regular(path).split(b"\n")    # a FIFO is skipped at once, not waited on
    except FileNotFoundError:
        return notes, problems
    except NotRegular as exc:
        return notes, [f"{FILENAME}: {exc.problem}; skipped"]
    except BadInput as exc:
        return notes, [f"{FILENAME}: {exc.problem}"]
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
    for n, raw in enumerate(raw_lines, 1):
        if not raw.strip():
            continue
        note, problem = _note(n, raw)
        if problem:
            problems.append(f"{FILENAME}:{n}: {problem}")
        if note is not None:
            notes.append(note)
    return notes, problems


def _note(n: int, raw: bytes) -> tuple[Note | None, str | None]:
    try:
        obj = loads(raw.decode("utf-8"))        # bounded nesting; NaN / Infinity read as None
    except (UnicodeDecodeError, ValueError):
        return None, "not JSON (a truncated or hand-edited line?)"
    if not isinstance(obj, dict):
        return None, "not a JSON object"
    wrong = wrong_field(obj, NOTE_FIELDS)
    if wrong:
        return None, f"{wrong}; note left out of the timeline"
    when = parse_iso(obj["time"]) if isinstance(obj.get("time"), str) else None
    if when is None:
        return None, f"no valid 'time' (RFC 3339, e.g. 2026-03-12T14:19:00Z): {obj.get('time')!r}"
    text = obj.get("text")
    if not isinstance(text, str) or not text.strip():
        return None, "no 'text'"
    recorded = parse_iso(obj["recorded_at"]) if isinstance(obj.get("recorded_at"), str) else None
    moment = obj.get("moment")
    problem = None
    if moment is not None and moment not in MOMENT_NAMES:
        problem = f"unknown moment {moment!r} (one of {', '.join(MOMENT_NAMES)}); read as a plain note"
        moment = None
    if moment is None:
        marker = _MARKER.search(text)
        moment = marker.group(1) if marker else None
    if recorded is not None and when > recorded + FUTURE_SLACK:
        problem = f"time {_z(when)} is after the note was recorded ({_z(recorded)})"
    author = obj.get("author")
    return Note(n, when, redact_output(" ".join(text.split())), author, recorded, moment), problem


def _z(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
