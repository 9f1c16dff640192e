"""Watch events into an incident's timeline: lines of INCIDENT/notes.jsonl.

Written with `triage note`'s own writer (one write on an O_APPEND descriptor, fsync'd, never
through a link), so a watch and a person running `triage note` at the same moment never
interleave, and `triage timeline INCIDENT` shows each event at the reading's time with its
source (notes.jsonl:N), the text beginning "triage watch:" and the author "triage watch".
"""
from __future__ import annotations

from pathlib import Path

from ...errors import TriageError
from ...redact import mask_text
from ...timeline.notes import MAX_TEXT, WATCH_AUTHOR, append_note
from .alerts import Event

AUTHOR = WATCH_AUTHOR            # the timeline shows these notes as signals, never as a response
PREFIX = "triage watch: "


class IncidentNotes:
    def __init__(self, incident: str | Path) -> None:
        self.incident = Path(incident)
        self.failed: str | None = None      # the last write's problem, for the caller to say once

    def write(self, event: Event) -> bool:
        text = mask_text(PREFIX + event.text)     # masked before it is cut: no half of a secret survives
        if len(text) > MAX_TEXT:
            text = text[:MAX_TEXT - 3] + "..."
        try:
            append_note(self.incident, text, author=AUTHOR, now=event.time)
        except TriageError as exc:
            self.failed = str(exc)
            return False
        self.failed = None
        return True
