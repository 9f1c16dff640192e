"""Server logs (vLLM V0/V1, SGLang, TGI, kernel lines pasted beside them) -> evidence.

Streaming: the file is read in blocks of whole lines into one reused buffer (log_blocks.py).
A bulk prefilter (prefilter.py) finds, at C speed, the lines that hold an anchor derived from the
signature data; only those go to the scanner (log_scanner.py), where lines that carry a known
signature, a traceback frame or an exception become records, and the rest are passed over
unread. While the server serves, the lines that dominate big logs (access lines, preemption
warnings, stats lines) are counted without being read (log_fast_path.py). Inside a multi-line
record (a traceback) every line is read. Files under PREFILTER_MIN_BYTES are read line by line:
the same records, without the cost of building the matcher. Each record notes the lifecycle phase of its source at that line
(starting / ready / serving), which the flowchart needs to tell a start-up OOM from a runtime
one, and how long the server had been up.
"""
from __future__ import annotations

from typing import Generator, Iterator

from ..model import Evidence, Phase
from .base import InputFile, ParseContext
from .log_blocks import BLOCK, iter_blocks
from .log_patterns import (ACCESS_MARK, BENIGN_EXCEPTIONS, CHUNK, MIN_CHUNK, REQUEST_REJECTED, SERVING_REQUEST,
                           is_request_log, short_path)
from .log_scanner import MAX_FRAMES, MAX_PIDS, LogScanner
from .log_wrap import SAMPLE_BYTES, Wrap, detect_wrap, joins_next

NAME = "log"
# A file smaller than this is read line by line: building the prefilter's matcher costs more than
# it saves (tests/test_prefilter.py lowers it to zero: both ways give the same records).
PREFILTER_MIN_BYTES = 256 * 1024

__all__ = [
    "ACCESS_MARK", "BENIGN_EXCEPTIONS", "BLOCK", "CHUNK", "LEAF", "MAX_FRAMES", "MAX_PIDS", "MIN_CHUNK", "NAME",
    "REQUEST_REJECTED", "SERVING_REQUEST", "LogScanner", "is_request_log", "iter_blocks", "parse", "short_path",
    "sniff",
]


def __getattr__(name: str):
    """The fast path's names, imported on first use (a small file's classify never needs them):
    LEAF, and odd_lines under its old name `_odd_lines`."""
    if name in ("LEAF", "_odd_lines"):
        from . import log_fast_path

        return log_fast_path.LEAF if name == "LEAF" else log_fast_path.odd_lines
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def sniff(head: bytes, name: str) -> int:
    """Any text is a candidate log; the dedicated parsers outbid this for their formats."""
    return 1


def parse(src: InputFile, ctx: ParseContext) -> Iterator[Evidence]:
    scanner = LogScanner(src, ctx)
    size = None if src.compressed else src.size()
    bulk = size is None or size >= PREFILTER_MIN_BYTES
    lineno = 1
    wrap: Wrap | None = None          # how a terminal wrapped the file (log_wrap.py)
    first = True
    for buf, end in iter_blocks(src, ctx):
        if first:
            first = False
            wrap = detect_wrap(memoryview(buf)[:min(end, SAMPLE_BYTES)])
            # A wrapped file is read line by line (a terminal's copy is small): its pieces are
            # joined before any reading, which the bulk prefilter's line picking cannot do.
            bulk = bulk and wrap is None
            if bulk:                  # imported here: a small file's classify does not pay for them
                from .log_fast_path import read_scan, serving_scan
        pos = 0
        if wrap is not None:
            lineno = yield from _unwrapped(scanner, buf, end, lineno, wrap)
            scanner.settle()
            continue
        while pos < end:
            if bulk and not scanner.busy:
                scan = serving_scan if scanner.phase is Phase.SERVING else read_scan
                pos, lineno = yield from scan(scanner, buf, pos, end, lineno)
                continue
            if not scanner.busy and (skip := scanner.skip_block(buf, pos, lineno)):
                pos, lineno = skip
                continue
            nl = buf.find(b"\n", pos)
            raw = buf[pos:nl]
            if not scanner.skippable(raw, lineno):
                yield from scanner.feed(lineno, raw.decode("utf-8", errors="replace"))
                if scanner.repeated_tb is not None:
                    scanner.learn_block(buf, nl + 1, lineno)
            pos, lineno = nl + 1, lineno + 1
        scanner.settle()                  # the buffer is reused for the next block
    yield from scanner.finish()


def _unwrapped(scanner: LogScanner, buf: bytearray, end: int, lineno: int,
               wrap: Wrap) -> Generator[Evidence, None, int]:
    """Feed buf[:end] line by line, each line a terminal cut at the wrap's width joined back first (it
    keeps its first piece's number). Returns the next line number."""
    pos = 0
    while pos < end:
        nl = buf.find(b"\n", pos)
        raw = buf[pos:nl]
        text = piece = raw.decode("utf-8", errors="replace").rstrip("\r")
        pieces = 1
        while nl + 1 < end:
            after = buf.find(b"\n", nl + 1)
            following = buf[nl + 1:after].decode("utf-8", errors="replace").rstrip("\r")
            if not joins_next(piece, following, wrap):
                break
            text, piece, nl, pieces = text + following, following, after, pieces + 1
        if not scanner.skippable(raw, lineno):
            yield from scanner.feed(lineno, text)
        pos, lineno = nl + 1, lineno + pieces
    return lineno
