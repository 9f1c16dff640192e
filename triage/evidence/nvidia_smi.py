"""nvidia-smi readings: `--query-gpu` / `--query-compute-apps` CSV and the plain table.

CSV (formats.md 4.1): comma+space separated, a header that echoes the field names with the
unit in brackets (`memory.used [MiB]`), value cells with a unit suffix unless `nounits`.
Unavailable values print as `[N/A]`, unsupported ones as `[Not Supported]`. Only files with a
header are read: without one the columns cannot be named reliably.

Table: the box-drawn output of a bare `nvidia-smi` (any driver layout since ~450): one block of
rows per GPU (index/name/bus id, then power/memory/utilisation), then a Processes table.
Several tables in one file (a `while true; do nvidia-smi; sleep 5; done` capture) are fine.
"""
from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Generator, Iterable, Iterator

from ..errors import BadInput
from ..lazyre import lazy
from ..model import Evidence
from ..units import finite_float, size_from, whole
from .base import InputFile, ParseContext, looks_binary
from .kinds import Kind

NAME = "nvidia_smi"

# Field names nvidia-smi prints in CSV headers (canonical names and the aliases it accepts).
_GPU_FIELDS = frozenset({
    "timestamp", "driver_version", "count", "name", "gpu_name", "serial", "gpu_serial", "uuid",
    "gpu_uuid", "pci.bus_id", "gpu_bus_id", "pci.domain", "pci.bus", "pci.device", "index",
    "memory.total", "memory.used", "memory.free", "memory.reserved", "utilization.gpu",
    "utilization.memory", "temperature.gpu", "temperature.memory", "power.draw", "power.limit",
    "pstate", "fan.speed", "persistence_mode", "compute_mode", "display_mode", "mig.mode.current",
    "clocks_event_reasons.active", "clocks_throttle_reasons.active", "clocks.sm", "clocks.mem",
    "ecc.errors.uncorrected.volatile.total", "retired_pages.pending", "vbios_version",
})
_APP_FIELDS = frozenset({"pid", "process_name", "used_gpu_memory", "used_memory"})
_KNOWN_FIELDS = _GPU_FIELDS | _APP_FIELDS
# Names no other CSV uses; one must be in a header before we call it ours ("index, name" is not enough).
_TELLING_FIELDS = frozenset({
    "used_gpu_memory", "used_memory", "process_name", "gpu_uuid", "gpu_name", "gpu_bus_id",
    "gpu_serial", "driver_version",
})

_HEADER_CELL_RE = re.compile(r"^(?P<field>[a-z_][a-z0-9_.]*)(?:\s*\[(?P<unit>[^\]]*)\])?$")
_VALUE_RE = re.compile(r"^(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]iB|B|%|W|MHz|C)?$")
_NA_VALUES = frozenset({"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]",
                        "[insufficient permissions]", "[gpu is lost]"})

_TABLE_BANNER_RE = re.compile(r"NVIDIA-SMI\s+(?P<smi>\S+)\s+Driver Version:\s*(?P<driver>\S+)")
_TABLE_STAMP_RE = lazy(
    r"^\s*(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)\s+(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
    r"\s+(?P<day>\d{1,2})\s+(?P<hms>\d{2}:\d{2}:\d{2})\s+(?P<year>\d{4})\s*$")
_BUS_ID_RE = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
# Names start and end with a non-blank (a blank cell has no name): with `.+?` between two runs of
# blanks a padded row backtracked cubically.
_GPU_CELL_RE = lazy(
    r"^\s*(?P<index>\d+)(?:\s+(?P<name>\S(?:.*?\S)??)(?:\s{2,}(?:On|Off|WDDM|TCC|N/A))?\s*|\s{2,})$")
_MEM_CELL_RE = lazy(r"(?<!\d)(?P<used>\d+)\s*(?P<uu>[KMG]iB)\s*/\s*(?P<total>\d+)\s*(?P<tu>[KMG]iB)")
_UTIL_CELL_RE = re.compile(r"^\s*(?P<pct>\d+)%")
# `|    0   N/A  N/A    1234      C   python3      81024MiB |`; GI/CI columns are absent before ~450.
# The process name is matched as above (a row without one leaves `name` empty).
_PROC_ROW_RE = lazy(
    r"^\|\s+(?P<gpu>\d+)\s+(?:(?P<gi>\S+)\s+(?P<ci>\S+)\s+)?(?P<pid>\d+|N/A)\s+"
    r"(?P<type>[CGM](?:\+[CGM])*)(?:\s+(?P<name>\S(?:.*?\S)??)\s+|\s{3,})(?P<mem>\d+\s*[KMG]iB|N/A)\s*\|\s*$")


# ---------------------------------------------------------------------------------- sniff


def sniff(head: bytes, name: str) -> int:
    if not head or looks_binary(head):
        return 0
    text = head.decode("utf-8", errors="replace")
    first = _first_nonblank(enumerate(text.splitlines(), 1))
    header = _header_fields(first[1].strip().lstrip("\ufeff")) if first else None
    if header is not None and (first[2] == 0 or _only_rows(text, len(header))):
        return 85
    banner = _TABLE_BANNER_RE.search(text)
    tabular = _other_lines(text) <= 2
    if banner:
        # An nvidia-smi capture is tables; a container log that printed one at start is a log,
        # and the log parser must see its other lines.
        return 90 if text.count("\n", 0, banner.start()) < 4 and tabular else 0
    if "| Processes:" in text and "GPU Memory" in text:
        return 60 if text.count("\n", 0, text.index("| Processes:")) < 4 and tabular else 0
    return 0


def _other_lines(text: str) -> int:
    """Lines that are neither table rows nor nvidia-smi's date banner (a capture has none)."""
    days = ("Mon ", "Tue ", "Wed ", "Thu ", "Fri ", "Sat ", "Sun ")
    return sum(1 for ln in (x.strip() for x in text.splitlines()[:400])
               if ln and ln[:1] not in "|+" and not ln.startswith(days))


# What people paste above a command's output: the shell prompt and command, a comment, a code
# fence. Up to MAX_PREAMBLE such lines may precede the CSV header.
_PREAMBLE_RE = re.compile(r"^(?:```|~~~|[$#>%]\s|PS [^>]*>|[\w.-]+@[\w.-][^$#]*[$#]\s)")
MAX_PREAMBLE = 3


def _is_preamble(line: str) -> bool:
    return bool(_PREAMBLE_RE.match(line.strip().lstrip("\ufeff")))


def _header_fields(line: str) -> list[tuple[str, str | None]] | None:
    """The (field, unit) list if `line` is an nvidia-smi CSV header, else None."""
    cells = [c.strip() for c in line.split(",")]
    if not cells or len(cells) > 64:
        return None
    fields: list[tuple[str, str | None]] = []
    for cell in cells:
        m = _HEADER_CELL_RE.match(cell)
        if not m:
            return None
        fields.append((m.group("field"), m.group("unit")))
    names = {f for f, _ in fields}
    known = names & _KNOWN_FIELDS
    telling = {f for f in known if "." in f or f in _TELLING_FIELDS}
    if not telling or len(known) * 2 < len(names):
        return None
    return fields


# ---------------------------------------------------------------------------------- parse


def parse(src: InputFile, ctx: ParseContext) -> Iterator[Evidence]:
    with src.open() as fh:
        lines = _decoded(fh)
        first = _first_nonblank(lines)
        if first is None:
            return
        header = _header_fields(first[1].strip().lstrip("\ufeff"))
        if header is not None:
            yield from _parse_csv(src, ctx, header, lines)
            return
        seen_table = yield from _parse_table(src, ctx, _chain([first[:2]], lines))
    if not seen_table:
        raise BadInput(src.display, "not nvidia-smi output: no CSV header and no nvidia-smi table "
                                    "(for CSV, query with --format=csv without noheader)")


def _decoded(fh: Iterable[bytes]) -> Iterator[tuple[int, str]]:
    for n, raw in enumerate(fh, 1):
        yield n, raw.decode("utf-8", errors="replace").rstrip("\r\n")


def _only_rows(text: str, cells: int) -> bool:
    """After a pasted prompt, the rest of the head must be the CSV itself (rows, fences, blanks):
    a paste that goes on with log lines is a log, and the log parser must see them."""
    lines = text.splitlines()
    rows = lines[:-1] if len(lines) > 1 and not text.endswith("\n") else lines   # the last may be cut
    header_seen = False
    for line in rows:
        stripped = line.strip()
        if not stripped:
            continue
        if not header_seen:
            header_seen = _header_fields(stripped.lstrip("\ufeff")) is not None
            continue
        if stripped.startswith(("```", "~~~")) or _is_preamble(stripped):
            continue
        if len(_csv_cells(stripped)) != cells:
            return False
    return True


def _first_nonblank(lines: Iterable[tuple[int, str]]) -> tuple[int, str, int] | None:
    """(number, line, pasted lines skipped) of the first line that is neither blank nor, within
    the first MAX_PREAMBLE, a pasted prompt, comment or code fence."""
    skipped = 0
    for n, line in lines:
        if not line.strip():
            continue
        if skipped < MAX_PREAMBLE and _is_preamble(line):
            skipped += 1
            continue
        return n, line, skipped
    return None


def _chain(first: list[tuple[int, str]], rest: Iterator[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    yield from first
    yield from rest


# ---- CSV


def _parse_csv(src: InputFile, ctx: ParseContext, header: list[tuple[str, str | None]],
               lines: Iterator[tuple[int, str]]) -> Iterator[Evidence]:
    names = [f for f, _ in header]
    units = dict(header)
    is_apps = "pid" in names or "used_gpu_memory" in names or "used_memory" in names
    for n, line in lines:
        if not line.strip():
            continue
        cells = _csv_cells(line)
        if len(cells) != len(names):
            continue  # a wrapped or cut row: not a reading
        if _header_fields(line.strip()) == header:
            continue  # the header again: several captures appended to one file
        row = {name: cell.strip() for name, cell in zip(names, cells)}
        time = _csv_time(row.get("timestamp"), ctx)
        if is_apps:
            yield _app_evidence(src, ctx, n, line, row, units, time)
        else:
            yield _gpu_evidence(src, ctx, n, line, row, units, time)


def _csv_cells(line: str) -> list[str]:
    import csv          # here, not at the top: most incidents have no nvidia-smi CSV to read

    try:
        return next(csv.reader([line], skipinitialspace=True), [])
    except csv.Error:
        return []  # a stray CR or NUL inside a row: not a reading


def _gpu_evidence(src: InputFile, ctx: ParseContext, n: int, line: str, row: dict[str, str],
                  units: dict[str, str | None], time: datetime | None) -> Evidence:
    fields: dict[str, Any] = {
        "gpu": _int(row.get("index")),
        "name": _text(row.get("name", row.get("gpu_name"))),
        "uuid": _text(row.get("uuid", row.get("gpu_uuid"))),
        "pci_bus_id": _text(row.get("pci.bus_id", row.get("gpu_bus_id"))),
        "used_bytes": _bytes(row, units, "memory.used"),
        "total_bytes": _bytes(row, units, "memory.total"),
        "free_bytes": _bytes(row, units, "memory.free"),
        "reserved_bytes": _bytes(row, units, "memory.reserved"),
        "utilization_pct": _number(row.get("utilization.gpu")),
        "driver_version": _text(row.get("driver_version")),
    }
    return ctx.evidence(src, n, Kind.GPU_MEMORY, line, time=time, **fields)


def _app_evidence(src: InputFile, ctx: ParseContext, n: int, line: str, row: dict[str, str],
                  units: dict[str, str | None], time: datetime | None) -> Evidence:
    mem_key = "used_gpu_memory" if "used_gpu_memory" in row else "used_memory"
    fields: dict[str, Any] = {
        "pid": _int(row.get("pid")),
        "name": _text(row.get("process_name")),
        "used_bytes": _bytes(row, units, mem_key),
        "gpu_uuid": _text(row.get("gpu_uuid", row.get("uuid"))),
        "gpu": None,                                    # the CSV names GPUs by uuid/bus, not index
        "gpu_name": _text(row.get("gpu_name", row.get("name"))),
        "gpu_bus_id": _text(row.get("gpu_bus_id", row.get("pci.bus_id"))),
        "type": None,
    }
    return ctx.evidence(src, n, Kind.GPU_PROCESS, line, time=time, **fields)


def _is_na(value: str | None) -> bool:
    return value is None or value.strip().lower() in _NA_VALUES


def _text(value: str | None) -> str | None:
    return None if _is_na(value) else value.strip()  # type: ignore[union-attr]


def _int(value: str | None) -> int | None:
    if _is_na(value):
        return None
    return whole(value.strip())  # type: ignore[union-attr]


def _number(value: str | None) -> float | None:
    if _is_na(value):
        return None
    m = _VALUE_RE.match(value.strip())  # type: ignore[union-attr]
    return finite_float(m.group("num")) if m else None


def _bytes(row: dict[str, str], units: dict[str, str | None], key: str) -> int | None:
    """A memory cell in bytes. `nounits` drops the cell's suffix; nvidia-smi memory is MiB then."""
    value = row.get(key)
    if _is_na(value):
        return None
    m = _VALUE_RE.match(value.strip())  # type: ignore[union-attr]
    if not m:
        return None
    unit = m.group("unit") or units.get(key) or "MiB"
    if unit not in ("B", "KiB", "MiB", "GiB", "TiB"):
        return None
    return size_from(m.group("num"), unit)


def _csv_time(value: str | None, ctx: ParseContext) -> datetime | None:
    """`2025/09/07 22:37:17.908`: local time of the host, no zone."""
    if _is_na(value):
        return None
    for fmt in ("%Y/%m/%d %H:%M:%S.%f", "%Y/%m/%d %H:%M:%S"):
        try:
            return ctx.times.localize(datetime.strptime(value.strip(), fmt))  # type: ignore[union-attr]
        except ValueError:
            continue
    return None


# ---- table


def _parse_table(src: InputFile, ctx: ParseContext,
                 lines: Iterable[tuple[int, str]]) -> Generator[Evidence, None, bool]:
    """Readings of every table in the file; returns whether any table was seen at all."""
    seen = False
    time: datetime | None = None
    driver: str | None = None
    in_procs = False
    pending: tuple[int, str, list[str]] | None = None   # the GPU row waiting for its memory row
    for n, line in lines:
        stamp = _table_time(line, ctx)
        if stamp is not None:
            time, in_procs, pending = stamp, False, None
            continue
        banner = _TABLE_BANNER_RE.search(line)
        if banner:
            driver, in_procs, pending, seen = banner.group("driver"), False, None, True
            continue
        if "| Processes:" in line:
            in_procs, pending, seen = True, None, True
            continue
        if in_procs:
            ev = _process_row(src, ctx, n, line, time)
            if ev is not None:
                yield ev
            continue
        cells = _cells(line)
        if pending is not None:
            yield _table_gpu(src, ctx, pending, n, cells, time, driver)
            pending = None
        elif len(cells) >= 2 and _BUS_ID_RE.search(cells[1]) and _GPU_CELL_RE.match(cells[0]):
            pending, seen = (n, line, cells), True
    return seen


def _cells(line: str) -> list[str]:
    s = line.strip()
    if not (s.startswith("|") and s.endswith("|")):
        return []
    return s[1:-1].split("|")


def _table_time(line: str, ctx: ParseContext) -> datetime | None:
    m = _TABLE_STAMP_RE.match(line)
    if not m:
        return None
    try:
        naive = datetime.strptime(f"{m['year']} {m['mon']} {m['day']} {m['hms']}", "%Y %b %d %H:%M:%S")
    except ValueError:
        return None
    return ctx.times.localize(naive)


def _table_gpu(src: InputFile, ctx: ParseContext, first: tuple[int, str, list[str]], n: int,
               cells: list[str], time: datetime | None, driver: str | None) -> Evidence:
    _, _, head = first
    gm = _GPU_CELL_RE.match(head[0])
    bus = _BUS_ID_RE.search(head[1])
    mem = _MEM_CELL_RE.search(cells[1]) if len(cells) >= 2 else None
    util = _UTIL_CELL_RE.match(cells[2]) if len(cells) >= 3 else None
    fields: dict[str, Any] = {
        "gpu": whole(gm["index"]) if gm else None,
        "name": (gm["name"] or "").strip() if gm else None,
        "uuid": None,
        "pci_bus_id": bus.group(0) if bus else None,
        "used_bytes": size_from(mem["used"], mem["uu"]) if mem else None,
        "total_bytes": size_from(mem["total"], mem["tu"]) if mem else None,
        "free_bytes": None,                  # the table does not print it; used+free != total anyway
        "reserved_bytes": None,
        "utilization_pct": finite_float(util["pct"]) if util else None,
        "driver_version": driver,
    }
    mem_text = f"{mem['used']}{mem['uu']} / {mem['total']}{mem['tu']}" if mem else "memory N/A"
    text = f"GPU {fields['gpu']} {fields['name']} {fields['pci_bus_id'] or ''}: {mem_text}".replace("  ", " ")
    return ctx.evidence(src, n, Kind.GPU_MEMORY, text, time=time, **fields)


def _process_row(src: InputFile, ctx: ParseContext, n: int, line: str,
                 time: datetime | None) -> Evidence | None:
    m = _PROC_ROW_RE.match(line.strip())
    if not m:
        return None
    mem = m["mem"]
    used = None
    if mem != "N/A":
        num, unit = re.match(r"^(\d+)\s*([KMG]iB)", mem).groups()  # type: ignore[union-attr]
        used = size_from(num, unit)
    fields: dict[str, Any] = {
        "pid": None if m["pid"] == "N/A" else whole(m["pid"]),
        "name": (m["name"] or "").strip(),
        "used_bytes": used,
        "gpu_uuid": None,
        "gpu": whole(m["gpu"]),
        "gpu_name": None,
        "gpu_bus_id": None,
        "type": m["type"],
    }
    mem_text = "N/A" if used is None else mem.replace(" ", "")
    text = f"GPU {m['gpu']} process {m['pid']} ({m['type']}) {fields['name']}: {mem_text}"
    return ctx.evidence(src, n, Kind.GPU_PROCESS, text, time=time, **fields)
