"""How triage writes a moment: RFC 3339 in UTC, to the millisecond, with a `Z`.

One format for every record a person or a program reads back — the audit log, the lock file,
notes, `watch` readings — so that sorting the strings sorts the moments.
"""
from __future__ import annotations

from datetime import datetime, timezone


def rfc3339(moment: datetime) -> str:
    """UTC, millisecond precision, `Z` suffix; naive datetimes are taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
