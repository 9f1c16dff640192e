"""Byte sizes as logs print them. The only place units are parsed or formatted."""
from __future__ import annotations

import re
from datetime import timedelta

_UNITS = {
    "b": 1, "byte": 1, "bytes": 1,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
    # vLLM prints GiB values with a "GB" label in several versions ("took 14.9888 GB" is /2**30),
    # and nvidia-smi's "MiB" is binary too; decimal units are accepted as written.
    "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "tb": 1000 ** 4,
    "k": 1 << 10, "m": 1 << 20, "g": 1 << 30,
}




def size_from(num: str, unit: str, *, gb_is_gib: bool = False) -> int:
    value = float(num.replace(",", ""))
    key = unit.lower()
    if gb_is_gib and key in ("kb", "mb", "gb", "tb"):
        key = key[0] + "ib"
    return int(round(value * _UNITS[key]))


def gib(value: float) -> int:
    return int(round(value * (1 << 30)))


def format_bytes(n: float | int | None) -> str:
    if n is None:
        return "?"
    n = float(n)
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} bytes"


def clock_parts(value: timedelta) -> tuple[str, int, int, int, int]:
    """(sign, days, hours, minutes, seconds) of a duration rounded to the second; each display
    of durations (timeline, postmortem) formats these its own way."""
    total = int(round(value.total_seconds()))
    sign, total = ("-" if total < 0 else ""), abs(total)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    return sign, days, hours, minutes, seconds
