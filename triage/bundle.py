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
    if len(raw) > MAX_INCIDENT_BYTES:
        raise BadInput(str(path), f"larger than {MAX_INCIDENT_BYTES >> 10} KiB: not an incident description")
    text = raw.decode("utf-8", errors="replace")
    data = simple_mapping(text)
    if data is not None:            # the usual header, read as yaml reads it without importing yaml
        _check_shape(data, Path(path))
        _check_header_lengths(data, Path(path))
        return data
    import yaml  # anything else: yaml itself (it costs ~20 ms of a cold start)

    try:
        data = yaml.safe_load(text)
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


# The shape nearly every incident.yaml has (`key: value` lines of a flat mapping), read without
# yaml. Only values whose YAML meaning is certain are accepted: a double-quoted string without
# escapes, `[]`, a decimal integer, or a plain word that starts with a letter and is none of
# YAML 1.1's booleans or nulls. Anything else (comments, nesting, lists, dates, floats, quotes with
# escapes, tabs, CR, non-ASCII, a repeated key...) returns None, and yaml reads the file.
# tests/test_bundle_simple_yaml.py checks every accepted form against yaml.safe_load.
_YAML_WORDS = frozenset("y Y n N yes Yes YES no No NO true True TRUE false False FALSE on On ON off Off OFF "
                        "null Null NULL".split())
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")
_KEY_CHARS = _LOWER | frozenset("0123456789_")
_LETTERS = _LOWER | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_WORD_CHARS = _LETTERS | frozenset("0123456789_.-")
_QUOTED_CHARS = frozenset(chr(c) for c in range(0x20, 0x7F)) - {'"', "\\"}


def simple_mapping(text: str) -> dict[str, Any] | None:
    """`text` as yaml.safe_load reads it when it is a flat mapping of plain `key: value` lines of
    the forms above; None for anything else."""
    out: dict[str, Any] = {}
    for line in text.split("\n"):
        if not line:
            continue
        key, sep, value = line.partition(": ")
        if not sep or not key or key[0] not in _LOWER or not _KEY_CHARS.issuperset(key) or key in _YAML_WORDS \
                or key in out or not value:
            return None
        if value == "[]":
            out[key] = []
        elif len(value) >= 2 and value[0] == value[-1] == '"' and _QUOTED_CHARS.issuperset(value[1:-1]):
            out[key] = value[1:-1]
        elif value.isascii() and value.isdigit() and (value == "0" or (value[0] != "0" and len(value) <= 18)):
            out[key] = int(value)
        elif value[0] in _LETTERS and _WORD_CHARS.issuperset(value) and value not in _YAML_WORDS:
            out[key] = value
        else:
            return None
    return out or None


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
