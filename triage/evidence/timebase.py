"""What year-less log times are read against: --year and --tz, else incident.yaml, else today.

vLLM writes `MM-DD HH:MM:SS`; the year and zone come from the user, from the bundle's
incident.yaml (`created`, `timezone`), or from the clock (each log then from its mtime).
"""
from __future__ import annotations

from pathlib import Path

from ..bundle import parse_incident, read_incident, zone
from ..errors import BadInput
from ..timeref import MAX_YEAR, MIN_YEAR, TimeReference, default_reference, parse_iso
from .inputs import ArchiveBundle


def read_bundle_meta(bundle: Path | ArchiveBundle | None) -> tuple[dict, Path | str | None]:
    """incident.yaml of a bundle directory or of a bundle packed in an archive; BadInput when it
    cannot be used (NotRegular for a FIFO or device planted there)."""
    if bundle is None:
        return {}, None
    if isinstance(bundle, ArchiveBundle):
        return parse_incident(bundle.raw, bundle.display), bundle.display
    return read_incident(bundle)


def time_reference(bundle: Path | ArchiveBundle | None, year: int | None, tz_name: str | None,
                   problems: list[str] | None = None, meta: tuple[dict, Path | str | None] | None = None
                   ) -> TimeReference:
    """`problems` collects what in incident.yaml could not be used (it is then ignored). `meta`:
    incident.yaml already read (read_bundle_meta), else it is read here."""
    tz = tz_source = None
    if tz_name:
        tz, tz_source = zone(tz_name, "--tz"), f"{tz_name} (--tz)"
    if bundle is not None:
        meta_doc, meta_path = meta if meta is not None else read_bundle_meta(bundle)
        created = parse_iso(str(meta_doc.get("created", ""))) if meta_doc.get("created") else None
        if meta_doc.get("created") and created is None and problems is not None:
            problems.append(f"{meta_path}: created: {str(meta_doc['created'])[:60]!r} is not a time from {MIN_YEAR} "
                            f"to {MAX_YEAR} (use e.g. 2026-03-12T14:17:05Z); ignored")
        if tz is None and meta_doc.get("timezone"):
            try:
                tz = zone(str(meta_doc["timezone"]), meta_path or str(bundle))
                tz_source = f"{meta_doc['timezone']} (incident.yaml)"
            except BadInput:
                tz = None
        if created is not None and year is None:
            ref = default_reference(None, tz, tz_source)
            return TimeReference(created, "incident.yaml", ref.tz, ref.tz_source, None)
    return default_reference(year, tz, tz_source)
