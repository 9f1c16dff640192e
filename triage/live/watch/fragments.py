"""Allocator fragmentation from the newest triage.hooks dumps: inactive_split / reserved.

The server writes `memory_stats-<UTC>-pid<PID>-dev<N>-<reason>.json` into `$TRIAGE_HOOKS_DIR/torch/`
(triage/hooks.py). The newest dump of each device is read (the names sort by time) and the
worst device counts, the measure the classifier's chronic rule uses. Only the newest few files
are opened, and a file larger than any real dump is skipped: the directory is the server's.
"""
from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path

from ...hooks import SUBDIR
from ...timeref import parse_iso
from ...units import whole
from .readings import Fragmentation, Source

MAX_DUMP_BYTES = 4 << 20               # a memory_stats dump is ~12 KB
_NAME = re.compile(r"^memory_stats-(?P<stamp>[0-9T.:-]+Z)-pid(?P<pid>\d+)-dev(?P<dev>\d+)-[a-z0-9_]+\.json$")
_LOOKED_AT = 64                        # newest names considered (a few devices x a few dumps)


def read_fragmentation(hooks_dir: str | os.PathLike[str]) -> tuple[Fragmentation | None, Source]:
    started = time.monotonic()
    folder = Path(hooks_dir) / SUBDIR
    try:
        names = sorted((n for n in os.listdir(folder) if _NAME.match(n)), reverse=True)[:_LOOKED_AT]
    except FileNotFoundError:
        return None, Source(False, f"no dumps yet ({folder} does not exist)", time.monotonic() - started)
    except OSError as exc:
        return None, Source(False, f"cannot list {folder}: {exc.strerror or exc}", time.monotonic() - started)
    newest: dict[str, str] = {}
    for name in names:          # newest first: the first name of each device is its newest dump
        newest.setdefault(_NAME.match(name)["dev"], name)    # type: ignore[index]
    readings = [r for r in (_read(folder / n) for n in newest.values()) if r is not None]
    took = time.monotonic() - started
    if not readings:
        return None, Source(False, f"no readable memory_stats dump in {folder}" if names else f"no dumps in {folder}",
                            took)
    worst = max(readings, key=lambda f: f.ratio)
    return worst, Source(True, f"{len(readings)} device dump(s), newest {worst.file}", took)


def _read(path: Path) -> Fragmentation | None:
    try:
        if path.stat().st_size > MAX_DUMP_BYTES:
            return None
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None       # a dump being replaced, or not ours: the next reading tries again
    stats = doc.get("memory_stats") if isinstance(doc, dict) else None
    if not isinstance(stats, dict):
        return None
    reserved = whole(stats.get("reserved_bytes.all.current"))
    inactive = whole(stats.get("inactive_split_bytes.all.current"))
    if not reserved or reserved <= 0 or inactive is None or inactive < 0:
        return None
    when = parse_iso(doc["time"]) if isinstance(doc.get("time"), str) else None
    age = (datetime.now(timezone.utc) - when).total_seconds() if when else None
    pid = whole(doc.get("pid"))
    return Fragmentation(inactive / reserved, inactive, reserved, path.name, doc.get("time") if when else None,
                         age, pid, _running(pid))


def _running(pid: int | None) -> bool:
    """Whether the process that wrote the dump still runs here: a dead process's allocator state
    died with it, and its dump says nothing about the server running now."""
    if pid is None or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True        # someone else's process, alive
    except OSError:
        return False
    return True
