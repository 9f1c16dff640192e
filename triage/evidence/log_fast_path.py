"""The serving fast path: the lines that dominate big logs, handled by C-level counts.

Access lines (uvicorn's `"GET /health HTTP/1.1" 200 OK`, a proxy's request line) say nothing
once the server is serving: a chunk whose newline count equals its access-marker count is
skipped after two counts. A chunk whose other lines are all repetitive (preemption warnings,
stats lines, admission lines, warnings learned as noise, a known repeated error block) is
counted into the scanner's buckets without a Python look at each line. Any other chunk is
halved by counts down to LEAF bytes and its odd lines are fed to the scanner one by one.
The counts are exact: every record cites a real line.
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Generator, Iterator

from ..model import Evidence, Phase
from . import prefilter
from .log_scanner import MAX_PIDS
from .log_patterns import _REQUEST_LOG_MARKERS as REQUEST_LOG_MARKERS  # the markers is_request_log reads
from .log_patterns import ACCESS_MARK, CHUNK, MIN_CHUNK, SERVING_REQUEST, is_request_log
from .repeats import ADMISSION_MARK, PREEMPT_FAMILY, PREEMPT_MARK, RETRACT_MARK, STATS_MARK

if TYPE_CHECKING:
    from .log_scanner import LogScanner


def read_scan(scanner: LogScanner, buf: bytearray, pos: int, end: int,
              lineno: int) -> Generator[Evidence, None, tuple[int, int]]:
    """Not serving and not inside a record: feed only the lines of buf[pos:end] that can matter
    (the prefilter's), chunk by chunk, passing over the rest; stop just after a line that opens a
    record or shows the server serving. Once the server is up, a chunk of access lines alone
    (probes, scrapes) is passed over after two counts. Returns (position, line number) to resume at."""
    count, find = buf.count, buf.find
    a = pos
    while a < end:
        b = find(b"\n", min(a + CHUNK, end - 1), end) + 1 or end
        lines_here = count(b"\n", a, b)
        if scanner.phase is not Phase.STARTING and lines_here == count(ACCESS_MARK, a, b) \
                and find(SERVING_REQUEST, a, b) < 0:
            todo = _pid_lines(scanner, buf, a, b)
        else:
            group = "every" if scanner.phase is Phase.STARTING else "ready"
            todo = _merge(prefilter.matcher(group).starts(buf, a, b), _pid_lines(scanner, buf, a, b),
                          _block_heads(scanner, buf, a, b))
        lines = _LineCounter(buf, a, lineno)
        done = a                                   # buf[a:done] is read or passed over
        for at in todo:
            if at < done:
                continue
            at_line = lines.at(at)
            scanner.pass_over(buf, done, at, at_line)
            nl = find(b"\n", at, b)
            if skip := scanner.skip_block(buf, at, at_line):
                return skip                        # a known repeated error, counted
            raw = buf[at:nl]
            if not scanner.skippable(raw):
                yield from scanner.feed(at_line, raw.decode("utf-8", errors="replace"))
                if scanner.repeated_tb is not None:
                    scanner.learn_block(buf, nl + 1, at_line)
            done = nl + 1
            if scanner.busy or scanner.phase is Phase.SERVING:
                return done, at_line + 1
        scanner.pass_over(buf, done, b, lineno + lines_here)
        lineno += lines_here
        a = b
    return a, lineno


def _pid_lines(scanner: LogScanner, buf: bytearray, a: int, b: int) -> list[int]:
    """The lines of buf[a:b] that show a server process for the first time."""
    if len(scanner.pids) >= MAX_PIDS:
        return []
    return prefilter.new_pid_lines(buf, a, b, scanner.pids, scanner.pid_tokens, scanner.pid_of, scanner.pid_refusals)


def _block_heads(scanner: LogScanner, buf: bytearray, a: int, b: int) -> list[int]:
    """Where the known repeated error block may start in buf[a:b]: there it is counted whole."""
    block = scanner.repeats.block
    if block is None:
        return []
    return list(_occurrences(buf, block.head, a, b, at_line_start=True))


def _occurrences(buf: bytearray, needle: bytes, a: int, b: int, at_line_start: bool = False) -> Iterator[int]:
    at = buf.find(needle, a, b)
    while at >= 0:
        if not at_line_start or at == a or buf[at - 1] == 10:
            yield at
        at = buf.find(needle, at + 1, b)


def _merge(*sorted_lists: list[int]) -> list[int]:
    """Line starts from several sources, in order, each once."""
    present = [lst for lst in sorted_lists if lst]
    if len(present) <= 1:
        return present[0] if present else []
    return sorted(set().union(*present))


def serving_scan(scanner: LogScanner, buf: bytearray, pos: int, end: int,
                 lineno: int) -> Generator[Evidence, None, tuple[int, int]]:
    """Feed only the lines of buf[pos:] that can change the verdict while serving; stop where the
    phase changes.

    Chunks whose newline count equals their access-marker count are all access lines and are
    passed over after two C-speed counts. A chunk whose other lines are all repetitive ones —
    preemption warnings, stats lines, admission lines, warnings learned as noise (repeats.py),
    told apart by more counts — is handled without a Python look at each line (see _repeat_chunk).
    In any other chunk the prefilter finds the lines that can matter (see _read_chunk); the rest
    (DEBUG chatter, blobs, access lines) are passed over unread.
    Returns (position, line number) to resume at.
    """
    a = pos
    count, find = buf.count, buf.find
    storm = False                  # the last chunk held other lines: find stats lines first (below)
    while a < end:
        b = find(b"\n", min(a + scanner.chunk, end - 1), end) + 1 or end
        block = scanner.repeats.block
        if block is not None and block.countable:
            # End the chunk before a repeated block it would cut in two: whole, it is counted.
            cut = buf.rfind(block.head, a, b)
            if cut > a and cut + len(block.data) > b:
                b = cut
        pids = _pid_lines(scanner, buf, a, b)
        marks = scanner.stats_marks.markers
        if storm:
            # Counting the chunk's lines piece by piece between its stats lines numbers them too.
            stats_at, stats_lines, lines_here = _numbered(buf, marks, a, b, lineno)
        else:
            stats_at, stats_lines, lines_here = None, None, count(b"\n", a, b)
        known = count(ACCESS_MARK, a, b)
        storm = lines_here != known
        rest = 1 if pids else 0
        if storm and not pids:
            if stats_at is None:
                stats_at, stats_lines, _ = _numbered(buf, marks, a, b, lineno)
            pre, stats = count(PREEMPT_MARK, a, b), len(stats_at)
            blocks = scanner.blocks_in(buf, a, b)
            rest = lines_here - known - pre - stats - blocks * (scanner.repeats.block.lines if blocks else 0)
            for marker in scanner.noise.markers:
                if rest <= 0:
                    break
                rest -= count(marker, a, b)
            if rest and not scanner.tracebacks:
                # The other lines may be chatter that holds no anchor (never read, so never learned
                # as noise): when the prefilter finds no line but the counted ones, the chunk is
                # repetitive all the same.
                hits = prefilter.matcher("serving").starts(buf, a, b)
                if len(hits) <= pre + stats and not _block_heads(scanner, buf, a, b):
                    rest = 0
            if rest == 0 or (scanner.admissions and rest == count(ADMISSION_MARK, a, b)):
                rest = 0
            if rest == 0 and stats and _learned_marks_in(scanner, buf, a, b) \
                    and prefilter.matcher("feed").starts(buf, a, b):
                rest = 1                       # a line that could be a record holds a learned mark: read
            if rest == 0:
                if blocks:                     # a dead engine's per-request tracebacks, counted whole
                    last = buf.rfind(scanner.repeats.block.data, a, b)
                    scanner.repeats.add_blocks(lineno + lines_here - count(b"\n", last, b), blocks)
                yield from _repeat_chunk(scanner, buf, a, b, lineno, lines_here, pre, stats_at, stats_lines)
        if rest:
            stop = yield from _read_chunk(scanner, buf, a, b, lineno, pids)
            if stop is not None:
                scanner.chunk = MIN_CHUNK
                return stop
        else:
            scanner.pass_over(buf, a, b, lineno + lines_here)
        scanner.chunk = min(CHUNK, scanner.chunk * 2)
        lineno += lines_here
        a = b
    return end, lineno


def _read_chunk(scanner: LogScanner, buf: bytearray, a: int, b: int, lineno: int,
                pids: list[int]) -> Generator[Evidence, None, tuple[int, int] | None]:
    """Serving: read the lines of buf[a:b] the prefilter picks (and those showing a new server
    process), passing over the others. Returns where to resume when the phase changed or a
    record opened (None: the chunk is done)."""
    find = buf.find
    if not scanner.admissions and find(ADMISSION_MARK, a, b) >= 0:
        scanner.admitted()                         # admission lines say nothing new once serving
    hits, stats_only = prefilter.serving_lines(buf, a, b)
    todo = _merge(hits, pids, _block_heads(scanner, buf, a, b))
    first_sight = set(pids)
    lines = _LineCounter(buf, a, lineno)
    done = a
    for at in todo:
        if at < done:
            continue
        at_line = lines.at(at)
        scanner.pass_over(buf, done, at, at_line)
        nl = find(b"\n", at, b)
        raw = buf[at:nl]
        done = nl + 1
        fed = True
        if at in first_sight:
            yield from scanner.feed(at_line, raw.decode("utf-8", errors="replace"))
        elif ACCESS_MARK in raw or raw in scanner.noise or (not scanner.tracebacks and _request_log(raw)):
            fed = False                              # access lines and noise say nothing once serving
        elif PREEMPT_MARK in raw or RETRACT_MARK in raw:
            made = scanner.records
            yield from scanner.repeated(at_line, raw, PREEMPT_FAMILY if PREEMPT_MARK in raw else "retract")
            fed = scanner.records != made            # counted into its bucket, or read in full
        elif STATS_MARK in raw or prefilter.is_stats_line(raw, stats_only is not None and at in stats_only):
            scanner.learn_stats_mark(raw)
            scanner.hold_stats(at_line, raw)
            fed = False
        elif skip := scanner.skip_block(buf, at, at_line):
            return skip                              # a known repeated error, counted
        else:
            made = False
            for record in scanner.feed(at_line, raw.decode("utf-8", errors="replace")):
                made = True
                yield record
            if not made and scanner.phase is Phase.SERVING and not scanner.busy:
                scanner.noise.learn(raw)
        if not fed:                                  # its time still counts, as if it had been read
            scanner.pass_over(buf, at, done, at_line + 1)
        if scanner.phase is not Phase.SERVING or scanner.busy:
            return done, at_line + 1                 # resume just after this line
    scanner.pass_over(buf, done, b, lines.at(b))
    return None


# Each marker is_request_log looks for: a line holding none of them is no request-log line (one
# C-level search instead of a Python look for each marker).
_REQUEST_LOG_ANY = re.compile(b"|".join(re.escape(m) for m in REQUEST_LOG_MARKERS))


def _request_log(raw: bytes | bytearray) -> bool:
    return _REQUEST_LOG_ANY.search(raw) is not None and is_request_log(raw)


def _repeat_chunk(scanner: LogScanner, buf: bytearray, a: int, b: int, lineno: int, lines_here: int, pre: int,
                  stats_at: list[int], stats_lines: list[int]) -> Iterator[Evidence]:
    """buf[a:b] holds access, admission, preemption and stats lines only (the stats lines found and
    numbered already). The preemption warnings of the open time bucket are counted, found by
    bisecting on their times (a log's times only go forward); the first of a new bucket is read in
    full; stats lines are held raw, in order with them."""
    find, rfind, nl = buf.find, buf.rfind, b"\n"
    buckets, fam = scanner.repeats, PREEMPT_FAMILY
    if pre:                                  # the usual case: every warning in the open bucket
        first, last = find(PREEMPT_MARK, a, b), rfind(PREEMPT_MARK, a, b)
        first_start, last_start = rfind(nl, a, first) + 1 or a, rfind(nl, a, last) + 1 or a
        key = buckets.key(buf[first_start:first_start + 64])
        if buckets.fits(fam, key) and buckets.key(buf[last_start:last_start + 64]) == key:
            # Its line number counted back from the chunk's end: the tail is short, the head is not.
            buckets.add(fam, lineno + lines_here - buf.count(nl, last_start, b), buf[last_start:find(nl, last, b)], pre)
            pre = 0
    lines = _LineCounter(buf, a, lineno)
    s = 0                                    # the next stats line to hold
    marks = _positions(buf, PREEMPT_MARK, a, b, pre)
    i = 0
    while i < len(marks):
        start = rfind(nl, a, marks[i]) + 1 or a
        if buckets.fits(fam, buckets.key(buf[start:start + 64])):
            lo, hi = i, len(marks) - 1          # the last warning still in the open bucket
            while lo < hi:
                mid = (lo + hi + 1) // 2
                mid_start = rfind(nl, a, marks[mid]) + 1 or a
                if buckets.fits(fam, buckets.key(buf[mid_start:mid_start + 64])):
                    lo = mid
                else:
                    hi = mid - 1
            last_start = rfind(nl, a, marks[lo]) + 1 or a
            s = _hold(scanner, buf, stats_at, stats_lines, s, last_start, b)
            buckets.add(fam, lines.at(last_start), buf[last_start:find(nl, marks[lo], b)], lo - i + 1)
            i = lo + 1
            continue
        s = _hold(scanner, buf, stats_at, stats_lines, s, start, b)
        yield from scanner.repeated(lines.at(start), buf[start:find(nl, marks[i], b)], fam)
        i += 1
    _hold(scanner, buf, stats_at, stats_lines, s, b, b)


def _numbered(buf: bytearray, marks: tuple[bytes, ...], a: int, b: int,
              lineno: int) -> tuple[list[int], list[int], int]:
    """The starts of the lines of buf[a:b] holding any of `marks`, their line numbers, and the
    number of lines in buf[a:b]: the newlines are counted once, piece by piece between those lines."""
    find, rfind, count = buf.find, buf.rfind, buf.count
    starts: list[int] = []
    for mark in marks:
        at = find(mark, a, b)
        while at >= 0:
            starts.append(rfind(b"\n", a, at) + 1 or a)
            at = find(b"\n", at, b)            # one line counts once, whatever it holds
            at = -1 if at < 0 else find(mark, at, b)
    if len(marks) > 1:
        starts = sorted(set(starts))
    numbers = []
    pos, line = a, lineno
    for start in starts:
        line += count(b"\n", pos, start)
        pos = start
        numbers.append(line)
    return starts, numbers, line - lineno + count(b"\n", pos, b)


def _learned_marks_in(scanner: LogScanner, buf: bytearray, a: int, b: int) -> bool:
    return any(buf.find(mark, a, b) >= 0 for mark in scanner.stats_marks.learned)


def _hold(scanner: LogScanner, buf: bytearray, starts: list[int], numbers: list[int], s: int, before: int,
          b: int) -> int:
    """Hold the stats lines starts[s:] that begin before `before`, raw; the index of the next."""
    while s < len(starts) and starts[s] < before:
        scanner.hold_stats(numbers[s], buf[starts[s]:buf.find(b"\n", starts[s], b)])
        s += 1
    return s


class _LineCounter:
    """Line numbers of positions met in increasing order, counting each stretch once."""

    def __init__(self, buf: bytearray, start: int, lineno: int):
        self.buf, self.pos, self.lineno = buf, start, lineno

    def at(self, pos: int) -> int:
        self.lineno += self.buf.count(b"\n", self.pos, pos)
        self.pos = pos
        return self.lineno


def _positions(buf: bytearray, mark: bytes, a: int, b: int, n: int) -> list[int]:
    out, at = [], a
    for _ in range(n):
        at = buf.find(mark, at, b)
        out.append(at)
        at += len(mark)
    return out


LEAF = 1024


def odd_lines(buf: bytearray, a: int, b: int, lineno: int, lines: int) -> Iterator[tuple[int, int, bytearray]]:
    """(position, line number, line) of each line in buf[a:b] without the access marker, in order.

    buf[a:b] is whole lines and holds `lines` newlines. Halving with two counts per half finds a
    lone stats line among a chunk's ~90 access lines with a few KiB of C-level counting instead
    of a Python look at every line."""
    if b - a > LEAF:
        mid = buf.find(b"\n", (a + b) // 2, b - 1) + 1
        if mid:
            left = buf.count(b"\n", a, mid)
            left_odd = left != buf.count(ACCESS_MARK, a, mid)
            if left_odd:
                yield from odd_lines(buf, a, mid, lineno, left)
            right = lines - left
            if not left_odd or right != buf.count(ACCESS_MARK, mid, b):
                yield from odd_lines(buf, mid, b, lineno + left, right)
            return
    at = a
    for i, raw in enumerate(buf[a:b].split(b"\n")[:-1]):
        if ACCESS_MARK not in raw:
            yield at, lineno + i, raw
        at += len(raw) + 1
