"""A log file as blocks of whole lines, in bounded memory, with over-long "lines" dropped.

One buffer is reused for the whole file (see iter_blocks); a "line" longer than MAX_LINE_BYTES
is no log line and is read past, never held whole.
"""
from __future__ import annotations

import io
from typing import IO, Iterator

from ..errors import BadInput
from .base import MAX_LINE_BYTES, InputFile, ParseContext

BLOCK = 1024 * 1024


def iter_blocks(src: InputFile, ctx: ParseContext) -> Iterator[tuple[bytearray, int]]:
    """(buffer, end): buffer[:end] is whole lines (ends just after a newline); bounded memory.

    One buffer is reused for the whole file and only valid until the next block is asked for:
    reading into it (rather than allocating a fresh 8 MiB block and joining it to the last
    partial line) saves two copies of every byte. A "line" longer than MAX_LINE_BYTES is no log
    line: it is dropped (read past, never held whole), its place kept as an empty line so the line
    numbers after it stay right, and noted in `src.notes`; a file with nothing but such lines is
    refused (BadInput): it is not a text log.
    """
    # A small plain file gets a buffer its size (a directory of 100,000 of them would zero 100 GB)
    buf = bytearray(BLOCK if src.compressed else max(1, min(BLOCK, src.size() + 1)))
    have = 0                                   # a partial line carried at the front of buf
    skipping = False                           # inside an over-long line: drop bytes up to its newline
    long_lines: list[int] = []                 # byte offset where each over-long line starts
    offset = 0                                 # offset in the file of buf[0]
    kept = False                               # a line within the limit with something in it seen
    with src.open() as fh:
        while True:
            if have == len(buf):               # one line fills the buffer: grow it (bounded below)
                buf.extend(bytes(len(buf)))
            try:
                n = _read_into(fh, buf, have)
            except (OSError, EOFError) as exc:
                raise BadInput(src.display, f"cannot read: {exc}") from None
            if not n:
                break
            if ctx.progress:
                ctx.progress(n)
            total = have + n
            if skipping:
                nl = buf.find(b"\n", 0, total)
                if nl < 0:                     # still inside it: drop what was read
                    offset += total
                    have = 0
                    continue
                skipping = False               # it ends here: its newline stays, as an empty line
                buf[:total - nl] = buf[nl:total]
                offset += nl
                total -= nl
            cut = buf.rfind(b"\n", 0, total) + 1
            if cut > MAX_LINE_BYTES and _has_long_line(buf, cut):
                before = total
                cut, total = _drop_long_lines(buf, cut, total, offset, long_lines)
                offset += before - total       # (what follows the dropped lines moved up)
            if total - cut > MAX_LINE_BYTES:   # the partial line is over the limit: read past it
                long_lines.append(offset + cut)
                skipping = True
                if cut:
                    kept = kept or _has_text(buf, cut)
                    yield buf, cut
                offset += total
                have = 0
                continue
            if cut:
                kept = kept or _has_text(buf, cut)
                yield buf, cut
                buf[:total - cut] = buf[cut:total]      # the partial line moves to the front
                offset += cut
            have = total - cut
    if have:
        kept = kept or _has_text(buf, have)
        yield bytearray(buf[:have]) + b"\n", have + 1
    elif skipping:
        yield bytearray(b"\n"), 1                 # the over-long last line keeps its number
    if long_lines:
        if not kept:
            raise BadInput(src.display, f"a line is longer than {MAX_LINE_BYTES >> 20} MiB: not a text log")
        more = f" ({len(long_lines)} lines; the first" if len(long_lines) > 1 else " (the line"
        src.notes.append(f"a line longer than the {MAX_LINE_BYTES >> 20} MiB line limit was skipped{more} at "
                         f"byte {long_lines[0]:,}); the rest of the file was read")


def _has_text(buf: bytearray, end: int) -> bool:
    """Whether buf[:end] holds anything but newlines."""
    return buf.count(b"\n", 0, end) < end


def _drop_long_lines(buf: bytearray, cut: int, total: int, offset: int, found: list[int]) -> tuple[int, int]:
    """Empty the lines of buf[:cut] longer than MAX_LINE_BYTES in place (each keeps its newline)
    and move the partial line buf[cut:total] up behind them; the new (cut, total). The offset in
    the file of each line dropped is added to `found`."""
    out = pos = 0
    while pos < cut:
        nl = buf.find(b"\n", pos, cut)
        if nl - pos > MAX_LINE_BYTES:
            found.append(offset + pos)
            start = nl                      # keep only its newline
        else:
            start = pos
        length = nl + 1 - start
        if out != start:
            buf[out:out + length] = buf[start:nl + 1]
        out += length
        pos = nl + 1
    rest = total - cut
    buf[out:out + rest] = buf[cut:total]
    return out, out + rest


def _read_into(fh: IO[bytes], buf: bytearray, at: int) -> int:
    """Fill buf[at:] from fh; the number of bytes read (0 at the end)."""
    # buffered files, BytesIO and the decompressors' streams read straight into the buffer
    if isinstance(fh, io.BufferedIOBase):
        return fh.readinto(memoryview(buf)[at:]) or 0
    data = fh.read(len(buf) - at)
    buf[at:at + len(data)] = data
    return len(data)


def _has_long_line(buf: bytes, cut: int) -> bool:
    pos = 0
    while pos < cut:
        nl = buf.find(b"\n", pos, cut)
        if nl - pos > MAX_LINE_BYTES:
            return True
        pos = nl + 1
    return False
