"""The checks every reviewed data file (signatures, known bugs) makes of its entries on load, so a
typo fails loudly instead of silently disabling an entry."""
from __future__ import annotations

from typing import AbstractSet


def entry_label(name: str, index: int, item: object) -> str:
    """`signatures[3] (vllm-kv-insufficient)`: how an error names the entry."""
    ident = item.get("id", "?") if isinstance(item, dict) else "?"
    return f"{name}[{index}] ({ident})"


def shape_problem(item: object, allowed: AbstractSet[str], required: AbstractSet[str]) -> str | None:
    """What is wrong with the entry's shape (not a mapping, unknown or missing keys), or None."""
    if not isinstance(item, dict):
        return "not a mapping"
    unknown = set(item) - allowed
    if unknown:
        return f"unknown key(s) {sorted(unknown)}"
    missing = required - set(item)
    if missing:
        return f"missing key(s) {sorted(missing)}"
    return None
