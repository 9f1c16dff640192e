"""NVIDIA Xid codes (triage/data/xids.yaml), read once: hardware or not, root cause or not."""
from __future__ import annotations

from functools import lru_cache
from typing import Any, NamedTuple

from ..classes import compiled

AFTER_OOM = ("consequence", "informational")
_KEYS = {"code", "meaning", "hardware", "after_oom", "why"}


class XidDataError(ValueError):
    """xids.yaml has an entry that would silently change a verdict (an unknown role, no why)."""


class Xid(NamedTuple):
    code: int
    meaning: str
    hardware: bool
    after_oom: str | None        # "consequence" | "informational" | None
    why: str


@lru_cache(maxsize=1)
def xids() -> dict[int, Xid]:
    return parse_xids(compiled.load("xids"))


def parse_xids(doc: Any) -> dict[int, Xid]:
    out: dict[int, Xid] = {}
    for i, entry in enumerate((doc or {}).get("xids") or []):
        where = f"xids.yaml: xids[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("code"), int) or not entry.get("why"):
            raise XidDataError(f"{where}: expected a numeric code with a meaning and a why")
        if set(entry) - _KEYS:
            raise XidDataError(f"{where}: unknown key(s) {sorted(set(entry) - _KEYS)}")
        if entry.get("after_oom") not in (None, *AFTER_OOM):
            raise XidDataError(f"{where}: after_oom must be one of {AFTER_OOM}")
        if entry["code"] in out:
            raise XidDataError(f"{where}: Xid {entry['code']} is listed twice")
        out[entry["code"]] = Xid(entry["code"], str(entry.get("meaning", "")), bool(entry.get("hardware")),
                                 entry.get("after_oom"), str(entry["why"]))
    return out


def is_hardware(code: object) -> bool:
    entry = xids().get(code) if isinstance(code, int) else None
    return entry is not None and entry.hardware


def may_cause_oom(code: object) -> bool:
    """False for the Xids a GPU OOM leaves behind or that only record something (never a root cause)."""
    entry = xids().get(code) if isinstance(code, int) else None
    return entry is None or entry.after_oom is None
