"""Lines a terminal or a log viewer wrapped at a fixed width, joined back into the lines written.

A log copied out of a terminal (tmux, screen, a web console) arrives with every line longer than
the window cut into pieces of exactly the window's width: the allocator's message, an engine's
ready line, a Ray memory-monitor kill are each split wherever the column fell, often mid-word.
Such a file is recognised by its own shape: several lines of exactly the longest length, each
followed by a line that starts no record of its own (no time, level or process prefix, no frame,
no exception, no indentation). Only then are those pieces joined (with nothing between them: the
cut falls anywhere), and only a piece of exactly that width, so a log whose longest line merely
happens to repeat is read as it is. Where the console pads every line to the width with spaces,
a piece ending in spaces ends its line.

The joined line keeps the number of its first piece: evidence cites where the record starts.
"""
from __future__ import annotations

from typing import NamedTuple

from ..lazyre import lazy

# How much of a file's start is looked at to recognise the shape.
SAMPLE_BYTES = 256 * 1024
# Narrower than this, a "width" is more likely a short log's longest line than a window.
MIN_WIDTH = 60
# At least this many cut pieces, and this share of the longest lines followed by a continuation.
MIN_PIECES = 2
MIN_CONTINUED_SHARE = 0.6
# A console that pads: at least this share of the non-empty lines is exactly the width.
PADDED_SHARE = 0.5

# The start of a record: a time (ISO, syslog or glog), a level word, a bracketed or parenthesised
# prefix, a traceback's frame, caret or header, an exception, or indentation (a frame's code).
_RECORD_START = lazy(
    r"\s{2}|\t|\d{4}-\d{2}-\d{2}|\d{2}[-/]\d{2}[ T]|\d{2}:\d{2}:\d{2}|[IWEF]\d{4} "
    r"|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ \d]\d "
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE|NOTICE)\b|[\[(<{|>#*+=-]"
    r"|File \"|Traceback \(|During handling|The above exception"
    r"|(?:[\w.]{1,120}\.)?[A-Z]\w{0,80}(?:Error|Exception|Warning|Exit|Interrupt)\b"
    r"|[\w.-]{1,40}\[\d{1,10}\]:"                       # prog[pid]: (syslog without its date)
)


def starts_record(line: str) -> bool:
    return not line or _RECORD_START.match(line) is not None


def _pieces(lines: list[str], width: int, padded: bool) -> tuple[int, int]:
    """(lines of exactly `width`, padding aside, and how many of them a continuation follows)."""
    cut = continued = 0
    for i, line in enumerate(lines[:-1]):
        if len(line) == width and not (padded and line[-1].isspace()):
            cut += 1
            if not starts_record(lines[i + 1]):
                continued += 1
    return cut, continued


class Wrap(NamedTuple):
    width: int            # the window's width: every longer line was cut into pieces this long
    padded: bool          # the console padded every line to the width with spaces


def detect_wrap(head: bytes | bytearray) -> Wrap | None:
    """How the file was wrapped, judged from its first SAMPLE_BYTES; None if it was not."""
    sample = bytes(head[:SAMPLE_BYTES])
    end = sample.rfind(b"\n")
    if end < 0:
        return None
    lines = [raw.decode("utf-8", errors="replace").rstrip("\r") for raw in sample[:end].split(b"\n")]
    if len(lines) < 3:
        return None
    # Padded consoles make every line the window's width; the text before the padding is the line.
    width = max(len(line) for line in lines)
    if width < MIN_WIDTH:
        return None
    full = sum(1 for line in lines if len(line) == width)
    if full < MIN_PIECES:
        return None               # the usual log: one longest line (no regex compiled for it)
    # A console that pads every line to its width makes most lines that long. Only there does a
    # piece ending in spaces end its line (elsewhere a cut may fall just after a space).
    padded = full >= PADDED_SHARE * sum(1 for line in lines if line)
    cut, continued = _pieces(lines, width, padded)
    if cut >= MIN_PIECES and continued >= MIN_PIECES and continued >= MIN_CONTINUED_SHARE * cut:
        return Wrap(width, padded)
    return None


def joins_next(piece: str, following: str, wrap: Wrap) -> bool:
    """`following` is the rest of `piece`, cut at the file's width."""
    return (len(piece) == wrap.width and not (wrap.padded and piece[-1].isspace())
            and not starts_record(following))
