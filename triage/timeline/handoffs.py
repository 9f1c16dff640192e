"""Recovery steps handed to a person stay open until a note says they are done.

`triage recover --execute --yes` cannot rate-limit a gateway: it records such a step as handed
to a person. A note carrying `#done:STEP` at or after the hand-off closes it; the row then spans
hand-off -> note and cites both. What no note closes is listed, so no one reads it as done.
"""
from __future__ import annotations

from datetime import timezone

from ..recovery.handoff import MARKER, closed_steps
from .notes import Note
from .raw import Raw


def close_handoffs(raws: list[Raw], notes: list[Note]) -> list[str]:
    """Close the hand-offs a note closes (in place); one line per hand-off left open."""
    closing = [(n, closed_steps(n.text)) for n in notes if not n.automated]
    still_open: list[str] = []
    for raw in raws:
        if raw.handoff is None:
            continue
        note = next((n for n, steps in sorted(closing, key=lambda c: c[0].time)
                     if raw.handoff in steps and n.time >= raw.time), None)
        if note is None:
            still_open.append(f"recovery step {raw.handoff!r} was handed to a person at "
                              f"{raw.time.astimezone(timezone.utc):%H:%M:%S} ({raw.source}) and no note says it is "
                              f"done — close it with `triage note INCIDENT \"{MARKER}{raw.handoff} ...\"`")
            continue
        raw.text = raw.text.replace("handed to a person, open until a note says it is done",
                                    f"handed to a person, done by {note.source}", 1)
        raw.until = note.time
        raw.extra_sources = raw.extra_sources + (note.source,)
        raw.handoff = None
    return still_open
