"""The end of a log, secrets and request prompts masked, within a byte limit and a time limit.

A bundle leaves the host, so what it holds is masked the way every output of triage is
(`triage.redact.mask_text`). Masking costs far more than reading, so the tail is masked from the
end backwards, a chunk at a time, and the newest lines are kept first: when time runs out the
bundle holds the most recent part of the log, masked, rather than an older part or nothing. The
file's size is taken once at the start, so a log that keeps growing does not stretch the work.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from typing import BinaryIO

from ...redact import mask_text
from ...units import format_bytes

CHUNK = 1 << 20
MAX_LINE = 4 << 20              # a longer line is masked in pieces (it is cut where a chunk ends)


@dataclass(frozen=True)
class Tail:
    copied: int                 # bytes of the source covered (from `start` to the size at the start)
    start: int                  # offset in the source where the copy begins
    size: int                   # the source's size when the copy began
    cut_by_time: bool           # the time limit came first: older lines within the byte limit left out

    def describe(self) -> str:
        whole = self.start == 0 and not self.cut_by_time
        what = "whole log" if whole else f"last {format_bytes(self.copied)} of {format_bytes(self.size)}"
        return what + ", masked" + ("; masking ran out of time for the older lines" if self.cut_by_time else "")


def masked_tail(fd: int, out: BinaryIO, max_bytes: int, until: float, size: int | None = None) -> Tail:
    """Copy the last `max_bytes` of the file open at `fd` into `out`, whole lines only, each
    masked; stop going further back at monotonic time `until`."""
    size = os.fstat(fd).st_size if size is None else size
    floor = max(0, size - max_bytes)
    with tempfile.TemporaryFile() as spool:   # pieces newest first; copied out oldest first
        pieces: list[tuple[int, int]] = []    # (offset in spool, length)
        end, carry, cut, first = size, b"", False, size
        while end > floor:
            if time.monotonic() >= until and pieces:
                cut = True
                break
            begin = max(floor, end - CHUNK)
            data = os.pread(fd, end - begin, begin)
            if len(data) < end - begin:
                break                          # the file shrank (rotated) while read: keep what is whole
            data += carry                      # the end of a line that began in this chunk
            end, carry = begin, b""
            skip = 0
            if begin > 0 and not (begin == floor and os.pread(fd, 1, begin - 1) == b"\n"):
                # the chunk's first line may have begun before it
                newline = data.find(b"\n")
                if newline < 0 and begin > floor and len(data) < MAX_LINE:
                    carry = data               # no line starts in this chunk: read further back
                    continue
                skip = newline + 1 if newline >= 0 else len(data) if begin == floor else 0
                if begin > floor:
                    carry = data[:skip]        # completed by the chunk before this one
                # at the byte limit the first partial line is left out
            if len(data) > skip:
                masked = _mask(data[skip:])
                pieces.append((spool.tell(), len(masked)))
                spool.write(masked)
                first = begin + skip
        for offset, length in reversed(pieces):
            spool.seek(offset)
            left = length
            while left:
                chunk = spool.read(min(CHUNK, left))
                out.write(chunk)
                left -= len(chunk)
    return Tail(size - first, first, size, cut)


def _mask(data: bytes) -> bytes:
    # surrogateescape: bytes that are not UTF-8 (a binary blob in a log) come back unchanged
    return mask_text(data.decode("utf-8", errors="surrogateescape")).encode("utf-8", errors="surrogateescape")
