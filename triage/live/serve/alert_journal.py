"""What `triage serve` has been told and done, on disk under INCIDENTS/.triage-serve/journal.jsonl.

Every alert is written here when it is accepted, before the HTTP answer: a re-sent group finds
its alerts already known (one incident per fingerprint and `startsAt`, across restarts), and an
alert accepted but not yet turned into an incident, because the receiver was stopped or killed,
is queued again at the next start. One JSON object per line, appended with one write and
fsync'd (the notes' writer), so a crash leaves whole lines:

    {"op": "accept",  "key": K, "alert": ENVELOPE, "at": T}   queued
    {"op": "open",    "key": K, "incident": NAME, "class": C}  its bundle is in place
    {"op": "resolve", "key": K, "alert": ENVELOPE, "at": T}   a resolved payload came
    {"op": "close",   "key": K, "incident": NAME}              the resolution is in the bundle
    {"op": "fail",    "key": K, "reason": R}                   given up; a re-send tries again

At start the journal is read and rewritten compactly (one line per alert still worth knowing).
The journal holds alerts, so it is the receiver's user's alone (0600, in a 0700 directory), and
every line is masked value by value before it is serialised.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

from ...safedir import HeldDir
from ...timestamps import rfc3339
from .private import PRIVATE, make_private_dir

STATE_DIR = ".triage-serve"
FILENAME = "journal.jsonl"
QUEUED, OPEN, CLOSED = "queued", "open", "closed"
RETAIN_DAYS = 30


@dataclass
class Entry:
    key: str
    state: str
    alert: dict[str, Any]                        # the firing envelope
    incident: str | None = None
    klass: str | None = None
    resolution: dict[str, Any] | None = None     # the resolved envelope, until it is in the bundle
    at: str = field(default_factory=lambda: now_iso())


def now_iso() -> str:
    return rfc3339(datetime.now(timezone.utc))


class Journal:
    """The index of alerts by key. Thread-safe; every change is on disk before it returns."""

    def __init__(self, incidents: Path) -> None:
        self.dir = incidents / STATE_DIR
        make_private_dir(self.dir)
        # Held for the receiver's lifetime: the journal is written beneath this descriptor, so a link
        # planted as the state folder or the journal never redirects a write.
        self.held = HeldDir.open(self.dir)
        self.path = self.dir / FILENAME
        self.lock = threading.Lock()
        self.entries: dict[str, Entry] = {}
        self.problems: list[str] = []
        for n, op in self._read():
            self._apply(n, op)
        self._compact()

    # -- questions ---------------------------------------------------------------------------------

    def get(self, key: str) -> Entry | None:
        with self.lock:
            return self.entries.get(key)

    def queued(self) -> list[Entry]:
        """Alerts accepted and not yet in a bundle, oldest first: the work left by the last run."""
        with self.lock:
            return [e for e in self.entries.values() if e.state == QUEUED]

    def unclosed(self) -> list[Entry]:
        """Open incidents whose resolution came but is not in the bundle yet."""
        with self.lock:
            return [e for e in self.entries.values() if e.state == OPEN and e.resolution is not None]

    # -- changes -----------------------------------------------------------------------------------

    def accept(self, keyed: list[tuple[str, dict[str, Any]]]) -> None:
        """Several alerts at once (one payload): one write, so a crash keeps all or none."""
        at = now_iso()
        ops = [{"op": "accept", "key": k, "alert": a, "at": at} for k, a in keyed]
        with self.lock:
            self._write(ops)
            for op in ops:
                self._apply(0, op)

    def record(self, op: str, key: str, **fields: Any) -> None:
        doc = {"op": op, "key": key, **fields}
        with self.lock:
            self._write([doc])
            self._apply(0, doc)

    # -- the file ----------------------------------------------------------------------------------

    def _apply(self, n: int, op: dict[str, Any]) -> None:
        key, kind = op.get("key"), op.get("op")
        if not isinstance(key, str):
            self.problems.append(f"{FILENAME}:{n}: no key; skipped")
            return
        entry = self.entries.get(key)
        if kind == "accept" and isinstance(op.get("alert"), dict):
            if entry is None or entry.state == QUEUED:
                self.entries[key] = Entry(key, QUEUED, op["alert"], at=str(op.get("at") or now_iso()))
        elif kind == "resolve" and isinstance(op.get("alert"), dict):
            if entry is None:     # never seen firing: the resolution opens (and closes) the incident
                entry = self.entries[key] = Entry(key, QUEUED, op["alert"])
            if entry.state != CLOSED:
                entry.resolution = op["alert"]
        elif entry is None:
            self.problems.append(f"{FILENAME}:{n}: {kind} for an unknown alert; skipped")
        elif kind == "open":
            entry.state, entry.incident, entry.klass = OPEN, op.get("incident"), op.get("class")
        elif kind == "close":
            entry.state, entry.resolution = CLOSED, None
        elif kind == "fail":
            del self.entries[key]
        else:
            self.problems.append(f"{FILENAME}:{n}: unknown op {kind!r}; skipped")

    def _read(self) -> Iterator[tuple[int, dict[str, Any]]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        for n, line in enumerate(raw.split(b"\n"), 1):
            if not line.strip():
                continue
            try:
                op = json.loads(line)
            except ValueError:
                self.problems.append(f"{FILENAME}:{n}: not JSON (a line cut by a crash?); skipped")
                continue
            if isinstance(op, dict):
                yield n, op

    def _compact(self) -> None:
        """Rewrite the journal as one `accept` (and `open`, `resolve`) per known alert, forgetting
        alerts closed more than RETAIN_DAYS ago (accepted then, in fact): Alertmanager does not
        re-send those, and a bundle already in place is found by its name in any case."""
        from ...timeref import parse_iso

        cutoff = datetime.now(timezone.utc) - timedelta(days=RETAIN_DAYS)
        for key, e in list(self.entries.items()):
            accepted = parse_iso(e.at)
            if e.state == CLOSED and accepted is not None and accepted < cutoff:
                del self.entries[key]
        lines = []
        for e in self.entries.values():
            lines.append({"op": "accept", "key": e.key, "alert": e.alert, "at": e.at})
            if e.state in (OPEN, CLOSED):
                lines.append({"op": "open", "key": e.key, "incident": e.incident, "class": e.klass})
            if e.resolution is not None:
                lines.append({"op": "resolve", "key": e.key, "alert": e.resolution})
            if e.state == CLOSED:
                lines.append({"op": "close", "key": e.key, "incident": e.incident})
        self.held.write_atomic(FILENAME, "".join(_line(doc) for doc in lines).encode("utf-8"), PRIVATE)

    def _write(self, ops: list[dict[str, Any]]) -> None:
        data = "".join(_line(doc) for doc in ops).encode("utf-8")
        fd, created = self.held.open_append(FILENAME, PRIVATE)
        try:
            if not created:
                os.fchmod(fd, PRIVATE)             # a journal an older receiver left readable by all
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)


def _line(doc: dict[str, Any]) -> str:
    from ...redact import redact_output

    return json.dumps(redact_output(doc), ensure_ascii=False, sort_keys=True) + "\n"
