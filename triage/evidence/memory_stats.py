"""PyTorch caching-allocator numbers: `torch.cuda.memory_stats()` dumps and `memory_summary()` text.

JSON (formats.md 3.2): the flat dict (`allocated_bytes.all.current`, ...), the same nested under a
key (`{"device": 0, "memory_stats": {...}}`), the nested-dict form of
`memory_stats_as_nested_dict()`, a list of dumps (per device or per time), a dict keyed by
device (`{"cuda:0": {...}}`) or JSON Lines (one dump per line, as a periodic logger writes them).

Text (formats.md 3.2b): the 75-column `|` table of `memory_summary()`. Its sizes are floor-divided
integers, so the records say `approximate=True`. The table also turns up inside server logs;
`parse_summary_lines` lets the log parser read it there.
"""
from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, Mapping

from .. import safejson
from ..errors import BadInput
from ..lazyre import lazy
from ..model import Evidence
from ..timeref import parse_iso
from ..units import byte_count, finite_float, format_bytes, size_from, whole
from .base import InputFile, ParseContext, json_head, looks_binary
from .kinds import Kind

NAME = "memory_stats"

_FLAT_MARKERS = ("reserved_bytes.all.", "allocated_bytes.all.")
_NESTED_SNIFF_RE = lazy(rb'"(?:reserved|allocated)_bytes"\s*:\s*\{\s*"(?:all|large_pool|small_pool)"')
_TIME_KEYS = ("time", "timestamp", "ts", "at", "datetime", "date")
_DEVICE_KEYS = ("device", "device_id", "device_index", "gpu", "cuda_device")
_DEVICE_RE = re.compile(r"^(?:cuda:)?(\d+)$")
_MAX_DEPTH = 5

# (field stem, memory_stats key stem) for the byte statistics both forms carry.
_BYTE_STATS = (
    ("allocated", "allocated_bytes"),
    ("reserved", "reserved_bytes"),
    ("active", "active_bytes"),
    ("inactive_split", "inactive_split_bytes"),
    ("requested", "requested_bytes"),
)

SUMMARY_HEADER_RE = re.compile(r"PyTorch CUDA memory summary, device ID\s+(\d+)")
_OOMS_RE = re.compile(r"CUDA OOMs:\s*(\d+)")
_RETRIES_RE = re.compile(r"cudaMalloc retries:\s*(\d+)")
_SIZE = r"(?<!\d)(\d+)\s*(B|KiB|MiB|GiB|TiB|PiB)"
_SUMMARY_ROW_RE = lazy(
    r"\|\s*(?P<metric>Allocated memory|Active memory|Requested memory|GPU reserved memory|"
    r"Non-releasable memory)\s*\|\s*" + _SIZE + r"\s*\|\s*" + _SIZE + r"\s*\|")
_SUMMARY_METRICS = {
    "Allocated memory": "allocated",
    "Active memory": "active",
    "Requested memory": "requested",
    "GPU reserved memory": "reserved",
    "Non-releasable memory": "inactive_split",
}
_SUMMARY_COUNT_ROW_RE = lazy(
    r"\|\s*(?P<metric>Allocations|GPU reserved segments|Non-releasable allocs)\s*\|\s*(?P<cur>\d+)\s*(?:(?P<unit>[KM])\s*)?\|")
_SUMMARY_COUNTS = {
    "Allocations": "allocation_count",
    "GPU reserved segments": "segment_count",
    "Non-releasable allocs": "inactive_split_count",
}
_SUMMARY_MAX_LINES = 60          # the full table is 47 lines; a block never runs longer


# ---------------------------------------------------------------------------------- sniff


def sniff(head: bytes, name: str) -> int:
    if not head or looks_binary(head):
        return 0
    if json_head(head):
        if any(m.encode() in head for m in _FLAT_MARKERS):
            return 90
        return 80 if _NESTED_SNIFF_RE.search(head) else 0
    text = head.decode("utf-8", errors="replace")
    m = SUMMARY_HEADER_RE.search(text)
    if not m:
        return 0
    # A summary at the top is a summary file; deep inside, it is a log that printed one, and the
    # log parser reads the table there itself (along with the OOM line beside it).
    return 80 if text.count("\n", 0, m.start()) < 5 else 0


# ---------------------------------------------------------------------------------- parse


def parse(src: InputFile, ctx: ParseContext) -> Iterator[Evidence]:
    head = src.head()
    if json_head(head):
        if _looks_jsonl(head):
            yield from _parse_jsonl(src, ctx)
        else:
            yield from _parse_json(src, ctx)
    else:
        yield from _parse_text(src, ctx)


# ---- JSON


def _parse_json(src: InputFile, ctx: ParseContext) -> Iterator[Evidence]:
    doc = src.read_json()
    dumps = list(_find_dumps(doc, {}, 0))
    if not dumps:
        raise BadInput(src.display, "JSON holds no torch.cuda.memory_stats() dump")
    lines = _dump_lines(src, len(dumps)) if len(dumps) > 1 else [None] * len(dumps)
    for (stats, meta), line in zip(dumps, lines):
        yield _stats_evidence(src, ctx, line, stats, meta)


def _looks_jsonl(head: bytes) -> bool:
    """One complete JSON object on the first line and another object after it."""
    lines = [ln for ln in head.splitlines() if ln.strip()]
    if len(lines) < 2 or not lines[1].lstrip().startswith(b"{"):
        return False
    try:
        return isinstance(safejson.loads(lines[0].decode("utf-8", errors="replace")), dict)
    except ValueError:
        return False


def _parse_jsonl(src: InputFile, ctx: ParseContext) -> Iterator[Evidence]:
    found = 0
    with src.open() as fh:
        for n, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                doc = safejson.loads(raw.decode("utf-8", errors="replace"))
            except ValueError:
                continue  # a last line cut by the kill that ended the run (or unusable); the others still count
            for stats, meta in _find_dumps(doc, {}, 0):
                found += 1
                yield _stats_evidence(src, ctx, n, stats, meta)
    if not found:
        raise BadInput(src.display, "JSON Lines hold no torch.cuda.memory_stats() dump")


def _find_dumps(obj: Any, meta: dict[str, Any], depth: int) -> Iterator[tuple[Mapping[str, Any], dict[str, Any]]]:
    """Every memory_stats dump in a document, with the device/time found around it."""
    if depth > _MAX_DEPTH:
        return
    if isinstance(obj, list):
        for item in obj:
            yield from _find_dumps(item, meta, depth + 1)
        return
    if not isinstance(obj, dict):
        return
    here = {**meta, **_own_meta(obj)}
    if _is_flat_stats(obj):
        yield obj, here
        return
    if _is_nested_stats(obj):
        yield _flatten(obj), here
        return
    for key, value in obj.items():
        if isinstance(value, (dict, list)):
            sub = dict(here)
            device = _device(key) if isinstance(value, dict) else None
            if device is not None:
                sub["device"] = device          # {"cuda:0": {...}, "cuda:1": {...}}
            yield from _find_dumps(value, sub, depth + 1)


def _is_flat_stats(obj: Mapping[str, Any]) -> bool:
    return any(isinstance(k, str) and k.startswith(_FLAT_MARKERS) for k in obj)


def _is_nested_stats(obj: Mapping[str, Any]) -> bool:
    for stem in ("reserved_bytes", "allocated_bytes"):
        value = obj.get(stem)
        if isinstance(value, dict) and isinstance(value.get("all"), dict):
            return True
    return False


def _flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """`memory_stats_as_nested_dict()` back to the flat `a.b.c` keys."""
    flat: dict[str, Any] = {}
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _own_meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key in _DEVICE_KEYS:
        if key in obj and not isinstance(obj[key], (dict, list)):
            device = _device(obj[key])
            if device is not None:
                meta["device"] = device
                break
    for key in _TIME_KEYS:
        if key in obj and not isinstance(obj[key], (dict, list)):
            when = _time(obj[key])
            if when is not None:
                meta["time"] = when
                break
    return meta


def _device(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return whole(value)
    m = _DEVICE_RE.match(str(value).strip())
    return whole(m.group(1)) if m else None


def _time(value: Any) -> datetime | None:
    """RFC 3339 text, or Unix seconds/milliseconds (time.time() is what scripts write)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        when = parse_iso(value)
        if when is not None:
            return when
    number = finite_float(value)      # None for text that is no number, NaN, Infinity, 4,000 digits
    if number is not None and number > 0:
        seconds = number / 1000.0 if number > 1e11 else number
        try:
            return datetime.fromtimestamp(seconds, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    return None


def _dump_lines(src: InputFile, count: int) -> list[int | None]:
    """The line of each dump's `reserved_bytes.all.current`, when that key marks each dump once."""
    return src.key_lines(b'"reserved_bytes.all.current"', count)


def _stat(stats: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = stats.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # JSON may carry Infinity/NaN (json.dumps writes them) or 4,000 digits: not a byte count.
            number = finite_float(value)
            return byte_count(number) if number is not None else None
    return None


def _stats_fields(stats: Mapping[str, Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for stem, key in _BYTE_STATS:
        fields[f"{stem}_bytes"] = _stat(stats, f"{key}.all.current")
        fields[f"peak_{stem}_bytes"] = _stat(stats, f"{key}.all.peak")
    fields["num_alloc_retries"] = _stat(stats, "num_alloc_retries")
    fields["num_ooms"] = _stat(stats, "num_ooms")
    # The docstring says `allocated.*`, the real key is `allocation.*` (formats.md 3.2).
    fields["allocation_count"] = _stat(stats, "allocation.all.current", "allocated.all.current")
    fields["segment_count"] = _stat(stats, "segment.all.current")
    fields["inactive_split_count"] = _stat(stats, "inactive_split.all.current")
    fields["num_oom_rejections"] = _stat(stats, "num_oom_rejections")
    return fields


def _stats_evidence(src: InputFile, ctx: ParseContext, line: int | None, stats: Mapping[str, Any],
                    meta: Mapping[str, Any]) -> Evidence:
    fields = {"device": meta.get("device"), **_stats_fields(stats), "approximate": False}
    return ctx.evidence(src, line, Kind.MEMORY_STATS, render(fields, "memory_stats"),
                        time=meta.get("time"), **fields)


def render(fields: Mapping[str, Any], what: str) -> str:
    """One line for a MEMORY_STATS record (also used by the log parser for summaries)."""
    device = fields.get("device")
    parts = [
        f"allocated {format_bytes(fields.get('allocated_bytes'))}"
        f" (peak {format_bytes(fields.get('peak_allocated_bytes'))})",
        f"reserved {format_bytes(fields.get('reserved_bytes'))}"
        f" (peak {format_bytes(fields.get('peak_reserved_bytes'))})",
        f"inactive split {format_bytes(fields.get('inactive_split_bytes'))}",
        f"OOMs {_count(fields.get('num_ooms'))}",
        f"cudaMalloc retries {_count(fields.get('num_alloc_retries'))}",
    ]
    where = f"device {device}" if device is not None else "device ?"
    return f"{what} {where}: " + ", ".join(parts)


def _count(value: Any) -> str:
    return "?" if value is None else str(value)


# ---- memory_summary() text


def _parse_text(src: InputFile, ctx: ParseContext) -> Iterator[Evidence]:
    found = 0
    with src.open() as fh:
        lines = ((n, raw.decode("utf-8", errors="replace").rstrip("\r\n")) for n, raw in enumerate(fh, 1))
        for start, block in _summary_blocks(lines):
            fields = parse_summary_lines(block)
            if fields is not None:
                found += 1
                yield ctx.evidence(src, start, Kind.MEMORY_STATS, render(fields, "memory_summary"), **fields)
    if not found:
        raise BadInput(src.display, "no torch.cuda.memory_summary() table and not a memory_stats JSON")




def _summary_blocks(lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, list[str]]]:
    """(number of the header line, the table's lines) for each table; other lines are dropped."""
    block: list[str] = []
    start = 0
    for n, line in lines:
        if SUMMARY_HEADER_RE.search(line):
            if block:
                yield start, block
            block, start = [line], n
        elif block:
            if "|" not in line or len(block) >= _SUMMARY_MAX_LINES:
                yield start, block      # the table ended (a log line without cells follows)
                block = []
            else:
                block.append(line)
    if block:
        yield start, block


def parse_summary_lines(lines: list[str]) -> dict[str, Any] | None:
    """The MEMORY_STATS fields of the first memory_summary() table in `lines`, else None.

    Lines may carry a log prefix (`(VllmWorker rank=0 pid=1) |...`); only the table cells are read.
    Sizes are printed floor-divided (`75893 MiB`), so the byte values are lower bounds.
    """
    device: int | None = None
    fields: dict[str, Any] = {}
    seen_header = False
    for line in lines:
        m = SUMMARY_HEADER_RE.search(line)
        if m:
            if seen_header:
                break  # the next table starts
            seen_header, device = True, whole(m.group(1))
            continue
        if not seen_header:
            continue
        _summary_line(line, fields)
    if not seen_header or not any(k.endswith("_bytes") for k in fields):
        return None
    out: dict[str, Any] = {"device": device}
    for stem, _ in _BYTE_STATS:
        out[f"{stem}_bytes"] = fields.get(f"{stem}_bytes")
        out[f"peak_{stem}_bytes"] = fields.get(f"peak_{stem}_bytes")
    for key in ("num_alloc_retries", "num_ooms", *_SUMMARY_COUNTS.values()):
        out[key] = fields.get(key)
    out["num_oom_rejections"] = None        # the table does not show it
    out["approximate"] = True
    return out


def _summary_line(line: str, fields: dict[str, Any]) -> None:
    m = _OOMS_RE.search(line)
    if m:
        fields["num_ooms"] = whole(m.group(1))
    m = _RETRIES_RE.search(line)
    if m:
        fields["num_alloc_retries"] = whole(m.group(1))
    row = _SUMMARY_ROW_RE.search(line)
    if row:
        stem = _SUMMARY_METRICS[row.group("metric")]
        fields[f"{stem}_bytes"] = _floored_size(row.group(2), row.group(3))
        fields[f"peak_{stem}_bytes"] = _floored_size(row.group(4), row.group(5))
        return
    count = _SUMMARY_COUNT_ROW_RE.search(line)
    if count:
        scale = {"K": 1000, "M": 1000 ** 2}.get(count.group("unit") or "", 1)
        cur = whole(count.group("cur"))
        fields[_SUMMARY_COUNTS[count.group("metric")]] = cur * scale if cur is not None else None


def _floored_size(num: str, unit: str) -> int | None:
    if unit == "PiB":  # units.py stops at TiB; memory_summary() goes one further
        tib = size_from(num, "TiB")
        return tib * 1024 if tib is not None else None
    return size_from(num, unit)
