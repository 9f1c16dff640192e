"""Repetitive log lines aggregated while streaming, so a storm of them costs neither memory nor time.

A V0 server under pressure warns once for every preempted sequence group (350,000 warnings in a
600 MB log) and prints a stats line every few seconds. Each used to become a record; now:

* preemption warnings are counted per bucket of log time (1 min, widening as buckets pile up):
  the first warning of a bucket is a full record of its real line, carrying `repeats` (the
  warnings in the bucket), `last_line` and `until` (the bucket's last warning); the others are
  counted at C speed and never decoded;
* stats lines are held as raw bytes in the bounded window `_StatsWindow` already keeps (the
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

# vLLM V0's scheduler: "Sequence group X is preempted by PreemptionMode.RECOMPUTE mode because ..."
PREEMPT_MARK = b"is preempted by PreemptionMode."
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
    return bytes(m.group()[: _KEY_LENS[level]])


@dataclass
class _Bucket:
    key: bytes
    head: Evidence | None          # the full record of the bucket's first warning (None: it did not parse)
    count: int = 1
    last_line: int = 0
    last_raw: bytes = b""


class PreemptionBuckets:
    """Counts preemption warnings per bucket of log time; the head record of each carries the count."""

    def __init__(self, parse_time: Callable[[str], datetime | None]):
        self.parse_time = parse_time
        self.open: _Bucket | None = None
        self.heads = 0

    @property
    def level(self) -> int:
        return min(MAX_LEVEL, self.heads // BUCKETS_PER_LEVEL)

    def key(self, raw: bytes | bytearray) -> bytes | None:
        return time_key(raw, self.level)

    def fits(self, key: bytes | None) -> bool:
        """Whether a warning with this key joins the open bucket (no new record)."""
        return key is not None and self.open is not None and self.open.key == key

    def add(self, lineno: int, raw: bytes | bytearray, n: int = 1) -> None:
        """`n` more warnings in the open bucket, the last of them at `lineno` (`raw`)."""
        assert self.open is not None
        self.open.count += n
        self.open.last_line = lineno
        self.open.last_raw = bytes(raw)

    def start(self, key: bytes | None, head: Evidence | None, lineno: int, raw: bytes | bytearray) -> None:
        """A new bucket whose first warning is `head` (already emitted as a record)."""
        self.close()
        if key is None:
            return                   # a warning with no time: its own record, no bucket
        self.open = _Bucket(key, head, 1, lineno, bytes(raw))
        self.heads += 1

    def close(self) -> None:
        """Write the open bucket's count and span onto its head record."""
        bucket, self.open = self.open, None
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
