"""Type checks for the fields of a JSON Lines record (actions.jsonl, notes.jsonl) before any use.

Anyone who can write a bundle can put an object where a string belongs; a reader that hashes,
formats or compares the field would then fail on the whole bundle. A record is read only when
every field its readers use has one of the JSON types listed for it; fields not listed are never
read, so they are not checked.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NULL, BOOLEAN, INTEGER, NUMBER, STRING, ARRAY, OBJECT = "null", "boolean", "integer", "number", "string", "array", "object"

#: A field name -> the JSON types it may have.
Spec = Mapping[str, frozenset[str]]

_ARTICLE = {INTEGER: "an integer", ARRAY: "an array", OBJECT: "an object", NULL: "null"}
_ORDER = (STRING, INTEGER, NUMBER, BOOLEAN, ARRAY, OBJECT, NULL)


def json_type(value: Any) -> str:
    """The JSON type of a decoded value (a bool is not a number here, as it is not in JSON)."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return BOOLEAN
    if isinstance(value, int):
        return INTEGER
    if isinstance(value, float):
        return NUMBER
    if isinstance(value, str):
        return STRING
    if isinstance(value, list):
        return ARRAY
    return OBJECT if isinstance(value, dict) else type(value).__name__


def _named(kind: str) -> str:
    return _ARTICLE.get(kind, f"a {kind}")


def wrong_field(record: Mapping[str, Any], spec: Spec) -> str | None:
    """`'step' is an object, not a string or null` for the first listed field of a wrong type;
    None when every listed field present has an allowed type. An integer passes as a number."""
    for name, allowed in spec.items():
        if name not in record:
            continue
        kind = json_type(record[name])
        if kind in allowed or (kind == INTEGER and NUMBER in allowed):
            continue
        expected = " or ".join(_named(k) for k in _ORDER if k in allowed)
        return f"{name!r} is {_named(kind)}, not {expected}"
    return None


def spec(**fields: str) -> dict[str, frozenset[str]]:
    """spec(step="string null") -> {"step": frozenset({"string", "null"})}."""
    return {name: frozenset(kinds.split()) for name, kinds in fields.items()}
