"""The server's log: the tail of a file on this host, masked (see tail.py).

The file is opened without blocking and must be a regular file: a FIFO named as the log would
otherwise hang the collection until someone writes to it.
"""
from __future__ import annotations

import os
from pathlib import Path

from ...errors import BadInput
from ...evidence.compressed import MAGIC_BYTES, codec_of
from ...safefile import check_regular
from ..source import SourceRun
from .tail import Tail, masked_tail

MASK_MARGIN_S = 1.0        # kept back from the source's timeout to write the masked tail out


def log_file(run: SourceRun, path: Path, rel: str, max_bytes: int) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        run.fail("no such file")
        return
    except PermissionError:
        run.fail("permission denied")
        return
    except OSError as exc:
        run.fail(f"cannot read: {exc.strerror or exc}")
        return
    try:
        try:
            check_regular(fd, path)
        except BadInput as exc:
            run.fail(exc.problem)
            return
        os.set_blocking(fd, True)
        codec = codec_of(os.pread(fd, MAGIC_BYTES, 0))
        if codec is not None:
            run.fail(f"{codec}-compressed: collect takes the live, plain-text log (copy rotated files into "
                     "logs/ by hand)")
            return
        tail = write_masked(run, fd, rel, max_bytes)
        run.ok(tail.describe() if tail else "empty: nothing kept")
    finally:
        os.close(fd)


def write_masked(run: SourceRun, fd: int, rel: str, max_bytes: int, source: str | None = None) -> Tail | None:
    """The masked tail of the file open at `fd` into the bundle as `rel`; None for an empty file."""
    size = os.fstat(fd).st_size
    if not size:
        return None
    until = run.deadline - min(MASK_MARGIN_S, run.timeout_s * 0.2)
    box: list[Tail] = []
    run.write_with(rel, lambda out: box.append(masked_tail(fd, out, max_bytes, until, size)), source)
    return box[0]
