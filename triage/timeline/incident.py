"""What incident.yaml says about the incident: id, title, date, zone, fleet size, hand-set moments."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any

from ..errors import BadInput
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


def incident_dir(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise BadInput(str(path), "no such incident directory")
    if not p.is_dir():
        raise BadInput(str(path), "not a directory (give the incident bundle directory)")
    return p


def load_incident(path: str | Path) -> IncidentInfo:
    root = incident_dir(path)
    meta, has_yaml = _meta(root)
    created = parse_iso(str(meta["created"])) if meta.get("created") else None
    tz, tz_note = timezone.utc, "UTC (assumed: no timezone in incident.yaml)" if has_yaml else "UTC (assumed: no incident.yaml)"
    if meta.get("timezone"):
        tz, tz_note = zone(str(meta["timezone"]), root / "incident.yaml"), f"{meta['timezone']} (incident.yaml)"
    fleet = meta.get("fleet_size")
    moments = meta.get("moments")
    return IncidentInfo(
        path=root,
        id=str(meta.get("id") or root.resolve().name),
        title=str(meta.get("title") or ""),
        created=created,
        tz=tz,
        tz_note=tz_note,
        fleet_size=fleet if isinstance(fleet, int) and not isinstance(fleet, bool) and fleet > 0 else None,
        moments=dict(moments) if isinstance(moments, dict) else {},
        has_yaml=has_yaml,
        tz_name=str(meta["timezone"]) if meta.get("timezone") else None,
    )


def zone(name: str, where: Path | str) -> tzinfo:
    if name.upper() in ("UTC", "Z", "GMT"):
        return timezone.utc
    try:
        from zoneinfo import ZoneInfo

        return ZoneInfo(name)
    except Exception:
        raise BadInput(str(where), f"unknown time zone {name!r}") from None


def _meta(root: Path) -> tuple[dict, bool]:
    for name in ("incident.yaml", "incident.yml"):
        f = root / name
        if f.exists():
            import yaml

            try:
                data = yaml.safe_load(f.read_text(encoding="utf-8", errors="replace"))
            except yaml.YAMLError as exc:
                raise BadInput(str(f), f"invalid YAML: {str(exc).splitlines()[0]}") from None
            except OSError as exc:
                raise BadInput(str(f), f"cannot read: {exc.strerror or exc}") from None
            return (data if isinstance(data, dict) else {}), True
    return {}, False
