"""What incident.yaml says about the incident: id, title, date, zone, fleet size, hand-set moments."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any

from ..bundle import read_incident, zone
from ..errors import BadInput
from ..safefile import NotRegular
from ..timeref import parse_iso


@dataclass(frozen=True)
class IncidentInfo:
    path: Path
    id: str
    title: str
    created: datetime | None          # UTC
    tz: tzinfo                        # zone of zone-less times written by people (notes, --at)
    tz_note: str                      # "UTC (incident.yaml)" / "UTC (assumed: no timezone in incident.yaml)"
    fleet_size: int | None
    moments: dict[str, Any] = field(default_factory=dict)   # incident.yaml `moments:` (set by hand)
    has_yaml: bool = False
    tz_name: str | None = None        # incident.yaml `timezone` as written
    problems: list[str] = field(default_factory=list)   # values in incident.yaml that were not usable
    yaml_error: str | None = None     # incident.yaml could not be read (only with strict=False)


def incident_dir(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise BadInput(str(path), "no such incident directory")
    if not p.is_dir():
        raise BadInput(str(path), "not a directory (give the incident bundle directory)")
    return p


def load_incident(path: str | Path, *, strict: bool = True) -> IncidentInfo:
    """`strict=False`: an unreadable incident.yaml is reported in `yaml_error` instead of raised
    (a note must still be recordable in the middle of an outage)."""
    root = incident_dir(path)
    yaml_error = None
    problems: list[str] = []
    try:
        meta, yaml_path = read_incident(root)
        has_yaml = yaml_path is not None
    except NotRegular as exc:     # a FIFO or device named incident.yaml: read as if there were none
        meta, has_yaml, yaml_error = {}, False, f"{exc}; skipped"
        problems.append(yaml_error)
    except BadInput as exc:
        if strict:
            raise
        # as the evidence reader words it: the timeline lists the problem once
        meta, has_yaml, yaml_error = {}, True, f"{exc}; skipped"
        problems.append(yaml_error)
    created = parse_iso(str(meta["created"])) if meta.get("created") else None
    if meta.get("created") and created is None:
        problems.append(f"incident.yaml created: {str(meta['created'])[:60]!r} is not a time (use 2026-03-12T14:17:05Z); "
                        "the incident's date is taken from the evidence")
    tz, tz_note = timezone.utc, "UTC (assumed: no timezone in incident.yaml)" if has_yaml else "UTC (assumed: no incident.yaml)"
    if meta.get("timezone"):
        try:
            tz, tz_note = zone(str(meta["timezone"]), root / "incident.yaml"), f"{meta['timezone']} (incident.yaml)"
        except BadInput as exc:
            if strict:
                raise
            yaml_error = str(exc)
    fleet = meta.get("fleet_size")
    fleet_ok = isinstance(fleet, int) and not isinstance(fleet, bool) and fleet > 0
    if fleet is not None and not fleet_ok:
        problems.append(f"incident.yaml fleet_size: {fleet!r} is not a positive whole number; "
                        "the fleet size is unknown")
    moments = meta.get("moments")
    if moments is not None and not isinstance(moments, dict):
        problems.append("incident.yaml moments: not a mapping (use `moments: {detected: 2026-03-12T14:18:42Z}`); "
                        "ignored")
    return IncidentInfo(
        path=root,
        id=str(meta.get("id") or root.resolve().name),
        title=str(meta.get("title") or ""),
        created=created,
        tz=tz,
        tz_note=tz_note,
        fleet_size=fleet if fleet_ok else None,
        moments=dict(moments) if isinstance(moments, dict) else {},
        has_yaml=has_yaml,
        tz_name=str(meta["timezone"]) if meta.get("timezone") else None,
        problems=problems,
        yaml_error=yaml_error,
    )
