"""Repetitive log lines aggregated while streaming, so a storm of them costs neither memory nor time.

A V0 server under pressure warns once for every preempted sequence group (350,000 warnings in a
600 MB log) and prints a stats line every few seconds. Each used to become a record; now:

* preemption warnings are counted per bucket of log time (1 min, widening as buckets pile up):
  the first warning of a bucket is a full record of its real line, carrying `repeats` (the
  warnings in the bucket), `last_line` and `until` (the bucket's last warning); the others are
  counted at C speed and never decoded;
* stats lines are held as raw bytes in the bounded window `StatsWindow` (log_stats_window.py) already keeps (the
  recent ones whole, older ones thinned) and parsed only when they are kept: before a failure or
  at the end of the file.

* a warning that repeats and says nothing the verdict reads ("Input prompt (N tokens) is too long
  and exceeds limit of 32768", "The following fields were present in the request but ignored")
  is learned from its first sighting — it made no record — and its kind is then counted away at
  C speed by a marker, the longest digit-free stretch of its message (`NoiseMarkers`).

Everything that cites evidence still cites real lines; the counts are exact.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from ..model import Evidence
from .kinds import Kind

# vLLM V0's scheduler: "Sequence group X is preempted by PreemptionMode.RECOMPUTE mode because ..."
PREEMPT_MARK = b"is preempted by PreemptionMode."
# SGLang's scheduler: "Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: ..."
RETRACT_MARK = b"out of memory happened. #retracted_reqs"
# vLLM's periodic stats line (V0 "Avg prompt throughput: ...", V1 "Engine 000: Avg prompt throughput: ...").
STATS_MARK = b"Avg prompt throughput"
# The admission line ("Added request cmpl-1."): once serving, it says nothing new.
ADMISSION_MARK = b"Added request "

# vLLM's `MM-DD HH:MM` (also inside an ISO date): the key of a one-minute bucket; each wider level
# drops characters: "MM-DD HH:M" (10 min), "MM-DD HH" (1 h). A minute of a storm is one record.
_TIME = re.compile(rb"\d\d-\d\d[ T]\d\d:\d\d")
_KEY_LENS = (11, 10, 8)
BUCKETS_PER_LEVEL = 1024
MAX_LEVEL = len(_KEY_LENS) - 1


def time_key(raw: bytes | bytearray, level: int) -> bytes | None:
    """The bucket a line's time falls in at `level`, from its first 64 bytes; None without a time."""
    m = _TIME.search(raw, 0, 64)
    if m is None:
        return None
    return bytes(m.group()[: _KEY_LENS[level]]).replace(b"T", b" ")


@dataclass
class _Bucket:
    """A run of one repeated record in one time bucket: its first line in full, how many, the last line."""
    key: bytes
    head: Evidence | None          # the full record of the bucket's first line (None: it did not parse)
    count: int = 1
    last_line: int = 0
    last_raw: bytes = b""


# The kinds of record that repeat in a storm and are counted per bucket instead of kept one by one.
# A family is one kind of repeated line: V0's preemption warnings, SGLang's retractions, the same
# failed-request or dead-engine error (a dead V0 engine fails every later request with a traceback
# of its own), the tracebacks that carry them. Each family has at most one open bucket.
PREEMPT_FAMILY = "preempt"
_REPEATED_KINDS = {Kind.PREEMPTION, Kind.REQUEST_FAILED, Kind.ENGINE_DEAD}
# What differs between two lines of one error: numbers, request ids, addresses.
_VARYING = re.compile(r"0x[0-9a-fA-F]+|[0-9a-fA-F-]{8,}|\d+")


def family(kind: Kind, fields: dict, text: str) -> str | None:
    """The family a record of `kind` repeats in, or None when such records are each kept. An error
    line no entry explains (logged at an error level) repeats with its wording: a server logging
    the same unexplained error for every request is one failure, many times."""
    if kind is Kind.EXCEPTION and fields.get("type") is None and fields.get("level"):
        return f"error-line:{_VARYING.sub('#', text[:160])}"
    if kind not in _REPEATED_KINDS:
        return None
    if kind is Kind.PREEMPTION:
        return "retract" if fields.get("mode") == "retract" else PREEMPT_FAMILY
    return f"{kind.value}:{fields.get('scope') or ''}:{_VARYING.sub('#', text[:160])}"


def traceback_family(exception: str | None, message: str | None, kinds: list[Kind]) -> str | None:
    """A traceback repeats with its error: only one that ends in a repeated kind's line does."""
    if not exception or not kinds or any(k not in _REPEATED_KINDS for k in kinds):
        return None
    return f"traceback:{exception}:{_VARYING.sub('#', (message or '')[:160])}"


def clock_key(when: datetime | None, level: int) -> bytes | None:
    """The bucket key of a line with no time of its own (uvicorn's traceback lines), from the last
    time its source logged."""
    return when.strftime("%m-%d %H:%M").encode()[: _KEY_LENS[level]] if when else None


@dataclass(frozen=True)
class RepeatedBlock:
    """The exact bytes of a multi-line error that made only repeated records (a traceback and its
    dead-engine line), with the family and line offset of each: the same bytes again are counted
    into the same buckets without being read."""
    data: bytes
    lines: int
    marks: tuple[tuple[str, int], ...]      # (family, line offset in the block)
    last_raw: bytes
    countable: bool                          # holds no other marker the chunk counts: buf.count() finds it

    @property
    def head(self) -> bytes:
        return self.data[: self.data.find(b"\n") + 1]


MAX_BLOCK_BYTES = 16 * 1024


class RepeatBuckets:
    """Counts repeated lines per family and bucket of log time; the head record of each bucket
    carries the count (`repeats`), its last line (`last_line`) and that line's time (`until`)."""

    def __init__(self, parse_time: Callable[[str], datetime | None]):
        self.parse_time = parse_time
        self.open: dict[str, _Bucket] = {}
        self.heads = 0
        self.touched: list[tuple[str, int]] = []    # (family, line) counted or started by the line being fed
        self.started = 0                            # buckets the line being fed started (each one a record)
        self.block: RepeatedBlock | None = None
        self._clock: tuple[tuple[datetime | None, int], bytes | None] = ((None, -1), None)

    def new_line(self) -> None:
        """A line is about to be fed: what it counts or starts is recorded afresh."""
        self.touched.clear()
        self.started = 0

    def learn_block(self, data: bytes, first_line: int, other_marks: tuple[bytes, ...]) -> None:
        """`data` (whole lines from `first_line`) made only the records of `touched`."""
        if len(data) > MAX_BLOCK_BYTES or not self.touched:
            return
        marks = tuple((fam, line - first_line) for fam, line in self.touched)
        if all(0 <= off for _, off in marks):
            self.block = RepeatedBlock(data, data.count(b"\n"), marks, data[data.rfind(b"\n", 0, -1) + 1:-1],
                                       not any(m in data for m in other_marks))

    def block_fits(self, last_time: datetime | None) -> bool:
        """Whether the known block, met now, joins its families' open buckets."""
        block = self.block
        assert block is not None
        key = self.key(block.data[:64]) or self._clock_key(last_time)
        return all(self.fits(fam, key) for fam, _ in block.marks)

    def _clock_key(self, when: datetime | None) -> bytes | None:
        if (when, self.level) != self._clock[0]:
            self._clock = ((when, self.level), clock_key(when, self.level))
        return self._clock[1]

    def add_blocks(self, lineno: int, n: int = 1) -> None:
        """`n` more of the known block, the last of them from `lineno`."""
        block = self.block
        assert block is not None
        for fam, off in block.marks:
            self.add(fam, lineno + off, block.last_raw, n)

    def skip_block(self, buf: bytearray, pos: int, lineno: int, last_time: datetime | None) -> int:
        """The length of the known block at buf[pos:] when it repeats into open buckets (counted
        then), else 0."""
        block = self.block
        if block is None or not buf.startswith(block.data, pos) or not self.block_fits(last_time):
            return 0
        self.add_blocks(lineno)
        return len(block.data)

    @property
    def level(self) -> int:
        return min(MAX_LEVEL, self.heads // BUCKETS_PER_LEVEL)

    def key(self, raw: bytes | bytearray) -> bytes | None:
        return time_key(raw, self.level)

    def fits(self, fam: str, key: bytes | None) -> bool:
        """Whether a line of family `fam` with this key joins its open bucket (no new record)."""
        bucket = self.open.get(fam)
        return key is not None and bucket is not None and bucket.key == key

    def add(self, fam: str, lineno: int, raw: bytes | bytearray, n: int = 1) -> None:
        """`n` more lines in the family's open bucket, the last of them at `lineno` (`raw`)."""
        bucket = self.open[fam]
        self.touched.append((fam, lineno))
        bucket.count += n
        bucket.last_line = lineno
        bucket.last_raw = bytes(raw)

    def start(self, fam: str, key: bytes | None, head: Evidence, lineno: int, raw: bytes | bytearray) -> None:
        """A new bucket of the family whose first line is `head` (emitted as a record); the
        family's previous bucket is closed, other families' stay open."""
        self._close(fam)
        if key is None:
            return                   # a line with no time: its own record, no bucket
        self.open[fam] = _Bucket(key, head, 1, lineno, bytes(raw))
        self.touched.append((fam, lineno))
        self.started += 1
        self.heads += 1

    def close(self) -> None:
        """Write every open bucket's count and span onto its head record."""
        for fam in list(self.open):
            self._close(fam)

    def _close(self, fam: str) -> None:
        bucket = self.open.pop(fam, None)
        if bucket is None or bucket.head is None or bucket.count == 1:
            return
        fields = bucket.head.fields
        fields["repeats"] = bucket.count      # type: ignore[index]  (a record's own dict, still being built)
        fields["last_line"] = bucket.last_line  # type: ignore[index]
        until = self.parse_time(bucket.last_raw.decode("utf-8", errors="replace"))
        if until is not None:
            fields["until"] = until           # type: ignore[index]


# A line with any of these is never learned as noise, whatever it made: a failure is never
# counted away. (Lower case; the line is lowered once, when it is considered.)
_NEVER_NOISE = (b"error", b"memory", b"kill", b"xid", b"oom", b"died", b"dead", b"cuda", b"nccl", b"exception",
                b"traceback", b"fatal", b"abort", b"fail", b"terminat", b"signal", b"exit", b"preempt", b"retract",
                b"evict", b"swap", b"cache", b"gpu", b" http/")
_LEVELS = (b"WARNING", b"INFO", b"DEBUG")
_STRETCH = re.compile(rb"[^\d\r\n]{24,}")
MAX_NOISE_MARKERS = 8


class NoiseMarkers:
    """Markers of repeated warnings that made no record, learned while serving (at most
    MAX_NOISE_MARKERS: the chunk test counts each)."""

    def __init__(self) -> None:
        self.markers: list[bytes] = []

    def __contains__(self, raw: bytes | bytearray) -> bool:
        return any(m in raw for m in self.markers)

    def learn(self, raw: bytes | bytearray) -> None:
        """`raw` made no record: remember its kind, unless it may ever matter."""
        if len(self.markers) >= MAX_NOISE_MARKERS or not any(level in raw[:40] for level in _LEVELS):
            return
        lowered = raw.lower()
        if any(word in lowered for word in _NEVER_NOISE):
            return
        cut = raw.find(b"] ")
        message = raw[cut + 2:] if 0 <= cut < 80 else raw[raw.find(b":") + 1:]
        stretches = _STRETCH.findall(message)
        if stretches:
            marker = bytes(max(stretches, key=len).strip())
            if len(marker) >= 24 and marker not in self.markers:
                self.markers.append(marker)


# The leading words of a stats line's message, up to its first number ("Decode batch. #running-req: ").
_LEADING_WORDS = re.compile(rb"[^\d\r\n]{16,}")
MAX_STATS_MARKERS = 4
MAX_STATS_TRIES = 64


class StatsMarkers:
    """The marks of stats lines: vLLM's STATS_MARK, and the leading words of other engines' stats
    lines (SGLang's "Decode batch. #running-req: "), learned from lines a stats signature matched
    while serving (at most MAX_STATS_MARKERS, from at most MAX_STATS_TRIES lines). The serving
    fast path counts a chunk's lines holding one as stats lines, held raw without a Python look at
    each; one that holds a learned mark only while the prefilter finds no line in the chunk that
    could make a record of its own (log_fast_path.serving_scan)."""

    def __init__(self) -> None:
        self.markers: tuple[bytes, ...] = (STATS_MARK,)
        self.tries = 0

    @property
    def learned(self) -> tuple[bytes, ...]:
        return self.markers[1:]

    def learn(self, message: bytes) -> None:
        """`message` (a line's message, its prefix cut) is a stats line's: remember how it starts."""
        if len(self.markers) > MAX_STATS_MARKERS or self.tries >= MAX_STATS_TRIES:
            return
        self.tries += 1
        m = _LEADING_WORDS.match(message.lstrip())
        if m is None:
            return
        mark = m.group(0)
        # a mark inside another, or holding one, adds nothing
        if not any(mark in known or known in mark for known in self.markers):
            self.markers += (mark,)
