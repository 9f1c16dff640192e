"""The incident bundle's own metadata: reading incident.yaml and naming its time zone.

One reader for every command (classify's time reference, the timeline, the postmortem,
recovery's `launch:`), so they agree on the file names, the errors and what a broken file says.
"""
from __future__ import annotations

from datetime import timezone, tzinfo
from pathlib import Path
from typing import Any

from .errors import BadInput

INCIDENT_FILES = ("incident.yaml", "incident.yml")
# Where `triage recover` logs the servers it relaunches: inside the bundle, but written after the
# failure, so the classifier skips it and the timeline reads it.
RELAUNCH_DIR = "recovery"


def read_incident(root: Path) -> tuple[dict[str, Any], Path | None]:
    """(incident.yaml as a mapping, its path); ({}, None) without one. BadInput when unreadable."""
    for name in INCIDENT_FILES:
        path = root / name
        if path.exists():
            import yaml  # only bundles have incident.yaml; keep it off the cold path

            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
            except yaml.YAMLError as exc:
                raise BadInput(str(path), f"invalid YAML: {str(exc).splitlines()[0]}") from None
            except OSError as exc:
                raise BadInput(str(path), f"cannot read: {exc.strerror or exc}") from None
            return (data if isinstance(data, dict) else {}), path
    return {}, None


def zone(name: str, where: Path | str) -> tzinfo:
    """A time zone by name (UTC, Europe/Berlin...); BadInput naming `where` when unknown."""
    if name.upper() in ("UTC", "Z", "GMT"):
        return timezone.utc
    try:
        from zoneinfo import ZoneInfo

        return ZoneInfo(name)
    except Exception:
        raise BadInput(str(where), f"unknown time zone {name!r}") from None
