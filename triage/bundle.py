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
            from .safefile import read_limited

            # a FIFO planted as incident.yaml is refused at once instead of blocking
            raw = read_limited(path, MAX_INCIDENT_BYTES,
                               f"larger than {MAX_INCIDENT_BYTES >> 10} KiB: not an incident description")
            return parse_incident(raw, path), path
    return {}, None


def parse_incident(raw: bytes, path: Path | str) -> dict[str, Any]:
    """incident.yaml's bytes as a mapping ({} for a document that is not one); BadInput naming
    `path` (and, for a syntax error, the line and column) when it cannot be used."""
    import yaml  # only bundles have incident.yaml; keep it off the cold path

    if len(raw) > MAX_INCIDENT_BYTES:
        raise BadInput(str(path), f"larger than {MAX_INCIDENT_BYTES >> 10} KiB: not an incident description")
    try:
        data = yaml.safe_load(raw.decode("utf-8", errors="replace"))
    except yaml.YAMLError as exc:
        raise BadInput(str(path), yaml_problem(exc)) from None
    except RecursionError:
        raise BadInput(str(path), f"invalid YAML: nested deeper than {MAX_YAML_DEPTH} levels") from None
    except (ValueError, OverflowError) as exc:
        # a value YAML types but Python cannot hold: `created: 0000-01-01`, an int of 5,000 digits
        why = "a number with more than 4,300 digits" if "4300 digits" in str(exc) else str(exc).splitlines()[0][:120]
        raise BadInput(str(path), f"invalid YAML value: {why}") from None
    _check_shape(data, Path(path))
    if isinstance(data, dict):
        _check_header_lengths(data, Path(path))
    return data if isinstance(data, dict) else {}


# The one-line header fields every reader prints (title, id...): a value past this is not a
# description but filler, and wrapping or charting it would cost every command seconds.
HEADER_FIELDS = ("id", "title", "service", "severity", "timezone", "created")
MAX_HEADER_CHARS = 1000


def _check_header_lengths(data: dict[str, Any], path: Path) -> None:
    for key in HEADER_FIELDS:
        value = data.get(key)
        if isinstance(value, str) and len(value) > MAX_HEADER_CHARS:
            raise BadInput(str(path), f"{key} is {len(value):,} characters long (at most {MAX_HEADER_CHARS:,}): "
                                      "not an incident header")


def yaml_problem(exc: Exception) -> str:
    """`invalid YAML at line 3, column 8: expected ',' or ']' (while parsing a flow sequence)`:
    where the parser gave up (yaml's problem_mark, 1-based) and why."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    context = getattr(exc, "context", None)
    if mark is None or not problem:
        lines = str(exc).splitlines()
        return f"invalid YAML: {lines[0] if lines else exc.__class__.__name__}"
    why = f"{problem} ({context})" if context else problem
    return f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: {why}"


MAX_INCIDENT_BYTES = 1 << 20
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000


def _check_shape(data: Any, path: Path) -> None:
    """BadInput for a document nested too deep, or one whose aliases expand past MAX_YAML_NODES
    values ("billion laughs": a few lines of `&a [*b, *b, ...]` that every reader would walk
    exponentially). Iterative, and stops at the budget."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    seen = 0
    while stack:
        node, depth = stack.pop()
        seen += 1
        if seen > MAX_YAML_NODES:
            raise BadInput(str(path), f"invalid YAML: more than {MAX_YAML_NODES:,} values (aliases that expand?)")
        if isinstance(node, dict):
            children: list[Any] = [*node.keys(), *node.values()]
        elif isinstance(node, (list, tuple, set, frozenset)):
            children = list(node)
        else:
            continue
        if depth > MAX_YAML_DEPTH:
            raise BadInput(str(path), f"invalid YAML: nested deeper than {MAX_YAML_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def zone(name: str, where: Path | str) -> tzinfo:
    """A time zone by name (UTC, Europe/Berlin...); BadInput naming `where` when unknown."""
    if name.upper() in ("UTC", "Z", "GMT"):
        return timezone.utc
    try:
        from zoneinfo import ZoneInfo

        return ZoneInfo(name)
    except Exception:
        raise BadInput(str(where), f"unknown time zone {name!r}") from None


def is_bundle(path: Path) -> bool:
    """A directory with an incident.yaml (or .yml) of its own."""
    return any((path / name).exists() for name in INCIDENT_FILES)


MAX_BUNDLE_DEPTH = 8


def sorted_entries(directory: str) -> list:
    """`os.scandir(directory)` in name order; [] when it cannot be read (a walk goes on past it)."""
    import os

    try:
        return sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return []


def find_bundles(root: Path) -> list[Path]:
    """The incident bundles under `root` (which is none itself), in name order: every directory
    holding an incident.yaml, not looked into further. Hidden directories, symlinked ones and
    the recovery/ logs are left out; the walk stops MAX_BUNDLE_DEPTH levels down."""
    found: list[Path] = []
    pending = [(str(root), 0)]
    while pending:
        here, depth = pending.pop()
        subdirs = []
        for entry in sorted_entries(here):
            try:
                if entry.name.startswith(".") or entry.name == RELAUNCH_DIR or not entry.is_dir(follow_symlinks=False):
                    continue
            except OSError:
                continue
            path = Path(entry.path)
            if is_bundle(path):
                found.append(path)
            elif depth + 1 < MAX_BUNDLE_DEPTH:
                subdirs.append((entry.path, depth + 1))
        pending.extend(reversed(subdirs))
    return sorted(found, key=lambda p: str(p))
