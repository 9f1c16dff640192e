"""JSON from inputs: bounded nesting, and only numbers that can be used.

Python's decoder recurses once per level of nesting, so `[[[[...` a thousand deep raises
RecursionError (not a ValueError) from inside it, and what it does return may be too deep for
the code that walks it afterwards. It also accepts `NaN` and `Infinity`, turns `1e999` into
infinity, and refuses integers over 4,300 digits with a bare ValueError. Here: nesting deeper
than MAX_DEPTH is `TooDeep` (a ValueError, as a JSONDecodeError is), and NaN, ±Infinity,
overflowing floats and integers of more than units.MAX_DIGITS digits decode as None (noted
through units.noting_dropped, so the run can say a number was dropped).
"""
from __future__ import annotations

import json
from typing import Any

from .units import MAX_DIGITS, finite_float, whole

# No input kind nests deeper than ~20 levels (a kubectl pod with managedFields); 64 leaves room
# and stays far below the interpreter's recursion limit for whatever walks the result.
MAX_DEPTH = 64


class TooDeep(ValueError):
    """The document nests deeper than MAX_DEPTH (or than the decoder can follow)."""

    def __init__(self) -> None:
        super().__init__(f"JSON nested deeper than {MAX_DEPTH} levels")


def _float(text: str) -> float | None:
    value = float(text)            # the decoder hands over valid JSON number text only
    return value if value - value == 0 else finite_float(text)     # inf - inf and nan - nan are nan


def _int(text: str) -> int | None:
    # The decoder hands over digits with an optional sign. More than MAX_DIGITS is no count a
    # file holds (and past 4,300 int() refuses it, past ~300 it overflows every float use).
    return int(text) if len(text) <= MAX_DIGITS else whole(text)


def _constant(text: str) -> None:
    finite_float(text)          # notes "NaN" / "Infinity" as dropped
    return None


_DECODER = json.JSONDecoder(parse_float=_float, parse_int=_int, parse_constant=_constant)


def loads(text: str) -> Any:
    """Decode one document. ValueError (json.JSONDecodeError or TooDeep) when it cannot be used."""
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        raise TooDeep() from None
    _check_depth(value, text)
    return value


def raw_decode(text: str) -> tuple[Any, int]:
    """The first document in `text` and where it ends (JSONDecoder.raw_decode), bounded the same way."""
    try:
        value, end = _DECODER.raw_decode(text)
    except RecursionError:
        raise TooDeep() from None
    _check_depth(value, text[:end])
    return value, end


def _check_depth(value: Any, text: str) -> None:
    # Fewer brackets than the limit cannot nest past it: skip the walk (most log lines).
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    if depth_exceeds(value, MAX_DEPTH):
        raise TooDeep()


def depth_exceeds(value: Any, limit: int) -> bool:
    """True when lists/dicts nest more than `limit` deep. Iterative: no recursion to overflow."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False
