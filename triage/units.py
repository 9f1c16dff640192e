"""Numbers and byte sizes as inputs print them. The only place units and numbers are parsed.

Inputs are not trusted to hold sane numbers: a damaged or hostile file may say `NaN`, `Inf`,
`1e999`, `5135..4` or a run of 5,000 digits where a count belongs. Every reader goes through
the helpers here, which answer None for those (never an exception, never a non-finite float),
and note what they dropped so that the run can say so (`noting_dropped`).
"""
from __future__ import annotations

import math
import re
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Iterator

from .lazyre import lazy

_UNITS = {
    "b": 1, "byte": 1, "bytes": 1,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
    # vLLM prints GiB values with a "GB" label in several versions ("took 14.9888 GB" is /2**30),
    # and nvidia-smi's "MiB" is binary too; decimal units are accepted as written.
    "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "tb": 1000 ** 4,
    "k": 1 << 10, "m": 1 << 20, "g": 1 << 30,
}

# The longest digit string read as a number. PIDs, line numbers, counts and byte sizes have at
# most 20 digits; a longer run is damage (and int() refuses more than 4,300 digits outright).
MAX_DIGITS = 30
# The largest byte count (either sign) taken as a reading: a zebibyte is no GPU or host memory.
MAX_BYTES = 1 << 70
_NUMBERISH = lazy(r"^\s*[-+]?(?:[\d.,]|nan|inf)", re.IGNORECASE)
_SIZE_TEXT = lazy(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)(?:(?<=[a-z])\s*)?$", re.IGNORECASE)


@dataclass
class Dropped:
    """Numbers a reader could not use, counted, with the first few as written."""

    count: int = 0
    examples: list[str] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.count += 1
        if len(self.examples) < 3:
            self.examples.append(text if len(text) <= 24 else f"{text[:12]}…({len(text)} characters)")

    def note(self) -> str:
        """`2 unreadable numbers dropped (e.g. 'Inf', '5135..4')`."""
        shown = ", ".join(repr(e) for e in self.examples)
        return f"{self.count:,} unreadable number{'s' if self.count != 1 else ''} dropped (e.g. {shown})"


_DROPPED: ContextVar[Dropped | None] = ContextVar("triage_dropped_numbers", default=None)


@contextmanager
def noting_dropped() -> Iterator[Dropped]:
    """Collect the numbers the helpers below drop while the block runs (one input file)."""
    found = Dropped()
    token = _DROPPED.set(found)
    try:
        yield found
    finally:
        _DROPPED.reset(token)


def note_dropped(text: Any) -> None:
    """Count `text` as a number a reader could not use (see noting_dropped)."""
    found = _DROPPED.get()
    if found is not None:
        found.add(str(text))


def finite_float(value: Any) -> float | None:
    """A finite float from number text (`1,234.5`) or a number; None otherwise.

    NaN, ±Inf, overflow (`1e999`), malformed text (`5135..4`) and digit runs longer than
    MAX_DIGITS are dropped (and noted when they looked like a number)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return float(value) if abs(value) < 10 ** MAX_DIGITS else _dropped(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else _dropped(value)
    if not isinstance(value, str):
        return None
    text = value.replace(",", "").strip()
    if len(text) > MAX_DIGITS + 8 and sum(c.isdigit() for c in text) > MAX_DIGITS:
        return _dropped(value)
    try:
        number = float(text)
    except ValueError:
        return _dropped(value) if _NUMBERISH.match(value) else None
    return number if math.isfinite(number) else _dropped(value)


def whole(value: Any) -> int | None:
    """A whole number from digit text (`1,024`, `-9`) or an int; None otherwise (noted when
    it looked like one). At most MAX_DIGITS digits: int() of a longer string is refused or slow."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value if abs(value) < 10 ** MAX_DIGITS else _dropped(value)
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and abs(value) < 10 ** MAX_DIGITS else _dropped(value)
    if not isinstance(value, str):
        return None
    text = value.replace(",", "").strip()
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isascii() or not digits.isdigit():
        return _dropped(value) if _NUMBERISH.match(value) else None
    if len(digits) > MAX_DIGITS:
        return _dropped(value)
    return int(text)


def as_int(value: float | int | None) -> int | None:
    """int() of a reading that may be NaN, ±Inf or absurdly large: None for those."""
    return whole(value) if value is not None else None


def _dropped(value: Any) -> None:
    note_dropped(value)
    return None


def byte_count(value: float | None) -> int | None:
    """A byte count from a finite float; None for non-finite values or beyond MAX_BYTES."""
    try:
        out_of_range = value is not None and (not math.isfinite(value) or abs(value) > MAX_BYTES)
    except OverflowError:                     # an int of hundreds of digits: no float holds it
        out_of_range = True
    if value is None or out_of_range:
        if value is not None:
            note_dropped(value)
        return None
    return int(round(value))


def size_from(num: str, unit: str, *, gb_is_gib: bool = False) -> int | None:
    """`1.5`, `GiB` -> bytes; None when the number cannot be read (see finite_float)."""
    value = finite_float(num)
    key = unit.lower()
    if gb_is_gib and key in ("kb", "mb", "gb", "tb"):
        key = key[0] + "ib"
    if value is None or key not in _UNITS:
        return None
    return byte_count(value * _UNITS[key])


def gib(value: float | str | None) -> int | None:
    """GiB (a number, or number text) -> bytes; None when it cannot be read."""
    number = finite_float(value)
    return byte_count(number * (1 << 30)) if number is not None else None


def parse_size(text: str) -> int | None:
    """`4GiB`, `500M`, `1073741824` (a limit given by a person) -> bytes; None if unreadable."""
    m = _SIZE_TEXT.match(text)
    if not m:
        return None
    unit = m.group(2).lower() or "b"
    if unit not in _UNITS:
        return None
    return size_from(m.group(1), unit)


def format_bytes(n: float | int | None) -> str:
    if n is None:
        return "?"
    n = float(n) if not isinstance(n, int) or abs(n) < MAX_BYTES else float(MAX_BYTES)
    if not math.isfinite(n):
        return "?"
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} bytes"


def count_noun(n: int, noun: str, nouns: str | None = None) -> str:
    """A count and its noun in agreement: `1 request`, `0 requests`, `1,024 sequences`.

    `nouns` is the plural where adding an s is wrong (`1 was`/`2 were` is the caller's)."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"


def clock_parts(value: timedelta) -> tuple[str, int, int, int, int]:
    """(sign, days, hours, minutes, seconds) of a duration rounded to the second; each display
    of durations (timeline, postmortem) formats these its own way."""
    total = int(round(value.total_seconds()))
    sign, total = ("-" if total < 0 else ""), abs(total)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return sign, days, hours, minutes, seconds
