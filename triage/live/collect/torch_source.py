"""The allocator dumps `triage.hooks` wrote inside the server process ($TRIAGE_HOOKS_DIR/torch/).

Only files named as the hooks name them are taken (never a link, never another program's
file), newest first, up to MAX_BYTES in all: snapshots can be hundreds of MiB. The tracebacks
and summaries are text and are masked like the logs; memory_stats JSON and snapshots hold numbers
and frames, and are copied as they are. Nothing is asked of the server: a signal to a process
without the hooks installed would end it.
"""
from __future__ import annotations

import os
from pathlib import Path

from ...errors import BadInput
from ...hooks import SUBDIR, _NAME_RE
from ...redact import mask_text
from ...safefile import check_regular
from ..source import SourceRun

MAX_BYTES = 512 << 20
CHUNK = 1 << 20
TEXT_SUFFIXES = (".txt", ".log")


def torch_dumps(run: SourceRun, directories: list[Path]) -> None:
    if not directories:
        run.skip("TRIAGE_HOOKS_DIR is not set for the server (see `triage.hooks`): no allocator dumps")
        return
    found: list[tuple[str, Path]] = []
    problems = []
    for root in directories:
        folder = root / SUBDIR
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            problems.append(f"{folder}: no dumps yet")
            continue
        except OSError as exc:
            problems.append(f"{folder}: {exc.strerror or exc}")
            continue
        found += [(m.group("stamp"), folder / n) for n in names if (m := _NAME_RE.match(n))]
    if not found:
        run.skip("; ".join(problems) or "no allocator dumps")
        return
    total, copied, left_out = 0, 0, 0
    for _, path in sorted(found, reverse=True):              # newest stamp first
        try:
            size = path.lstat().st_size
            if total + size > MAX_BYTES:
                left_out += 1
                continue
            _copy(run, path)
        except (OSError, BadInput):
            left_out += 1
            continue
        total += size
        copied += 1
    more = f"; {left_out} left out (over {MAX_BYTES >> 20} MiB or unreadable)" if left_out else ""
    if copied:
        run.ok(f"{copied} file{'s' if copied != 1 else ''}, {total / (1 << 20):.1f} MiB{more}")
    else:
        run.fail(f"no dump could be read{more}")


def _copy(run: SourceRun, path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        check_regular(fd, path)
        os.set_blocking(fd, True)
        if path.suffix in TEXT_SUFFIXES:                       # written bounded by the hooks (16 MiB)
            data = b"".join(iter(lambda: os.read(fd, CHUNK), b""))
            text = mask_text(data.decode("utf-8", errors="surrogateescape"))
            run.write(f"torch/{path.name}", text.encode("utf-8", errors="surrogateescape"), str(path))
            return
        run.write_with(f"torch/{path.name}", lambda out: _pump(fd, out), str(path))
    finally:
        os.close(fd)


def _pump(fd: int, out) -> None:
    while chunk := os.read(fd, CHUNK):
        out.write(chunk)
