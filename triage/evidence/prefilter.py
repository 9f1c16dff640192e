"""The log reader's bulk prefilter: which lines of a stretch of log can matter, found at C speed.

A line matters when it holds one of the anchors derived from the data (prefilter_anchors.py);
the rest are passed over unread, and the few things they could still change are brought up to
date from their bytes when needed: the first and last time seen (LogScanner.pass_over) and the
first line of each server process (new_pid_lines). The anchors are searched for all at once:

* with Hyperscan when its wheel is installed (about 2 GB/s for ~270 literals on one core);
* else with one regular expression shaped as a trie of the literals (Python's `re`: about
  25 MB/s; a flat alternation of the same literals runs at under 2 MB/s).

Measured on a 47 MB vLLM DEBUG log (benchmarks/README.md): Hyperscan 0.024 s, google-re2 0.075 s,
ahocorasick-rs 0.15 s, the trie regex 1.9 s, a flat `re` alternation 27 s.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import Callable, Protocol

from ..timeref import TimeReference
from .logline import parse_line
from .log_patterns import ACCESS_MARK
from .prefilter_anchors import WORD_END, Anchors, code_stamp, derive

ACCESS_ANCHOR = ACCESS_MARK.decode()
READY_ANCHOR = "POST /"          # the request line of a POST, quotes left out (JSON escapes them)

class Matcher(Protocol):
    def starts(self, buf: bytearray, a: int, b: int) -> list[int]:
        """The starts of the lines of buf[a:b] (whole lines) holding any of the literals, in order."""


class _Hyperscan:
    def __init__(self, literals: tuple[str, ...]):
        import hyperscan

        self.db = hyperscan.Database()
        # A literal that must end a word is searched for plain and its end checked here: a `\b`
        # in the database makes Hyperscan's compile ten times slower (70 ms).
        exprs = self.exprs = [re.escape(lit.removesuffix(WORD_END)).encode() for lit in literals]
        self.word_end = frozenset(i for i, lit in enumerate(literals) if lit.endswith(WORD_END))
        self.db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs),
                        flags=[0] * len(exprs))

    def starts(self, buf: bytearray, a: int, b: int) -> list[int]:
        return self.split_starts(buf, a, b, len(self.exprs))[0]

    def split_starts(self, buf: bytearray, a: int, b: int, first: int) -> tuple[list[int], set[int]]:
        """starts(), and those of the lines whose every literal is one of literals[first:]."""
        ends: list[int] = []
        ids: list[int] = []
        word_end = self.word_end

        def on_match(i: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            if i not in word_end or a + to >= b or not _WORD[buf[a + to]]:
                ends.append(to)
                ids.append(i)

        self.db.scan(memoryview(buf)[a:b], match_event_handler=on_match)
        out: list[int] = []
        late: set[int] = set()
        if not ends:
            return out, late
        find, rfind = buf.find, buf.rfind
        line_end = -1
        start = -1
        only_late = False
        for to, i in zip(ends, ids):                # reported in order of where each match ends
            at = a + to - 1
            if at <= line_end:                       # another literal of the same line
                only_late = only_late and i >= first
                continue
            if only_late:
                late.add(start)
            start = rfind(b"\n", a, at) + 1 or a
            out.append(start)
            only_late = i >= first
            line_end = find(b"\n", at, b)
            if line_end < 0:
                line_end = b
        if only_late:
            late.add(start)
        return out, late


_WORD = [chr(c).isalnum() or c == 95 for c in range(128)] + [False] * 128   # what `\b` of `re` on bytes sees


class _TrieRegex:
    def __init__(self, literals: tuple[str, ...]):
        self.rx = re.compile(_trie_pattern([lit.encode() for lit in literals]))



    def starts(self, buf: bytearray, a: int, b: int) -> list[int]:
        out: list[int] = []
        search, find, rfind = self.rx.search, buf.find, buf.rfind
        pos = a
        while pos < b:
            m = search(buf, pos, b)
            if m is None:
                break
            out.append(rfind(b"\n", a, m.start()) + 1 or a)
            nl = find(b"\n", m.end() - 1, b)
            pos = b if nl < 0 else nl + 1
        return out


def _expression(literal: str) -> bytes:
    """A literal as a regex (Hyperscan's syntax and Python's agree here)."""
    if literal.endswith(WORD_END):
        return re.escape(literal.removesuffix(WORD_END)).encode() + rb"\b"
    return re.escape(literal).encode()


def _trie_pattern(words: list[bytes]) -> bytes:
    """One regex for a set of literals, shaped as their trie: `re` then tests one branch per
    byte instead of every literal at every position."""
    trie: dict = {}
    end = WORD_END.encode()
    for word in words:
        node = trie
        bounded = word.endswith(end)
        for byte in word.removesuffix(end) if bounded else word:
            node = node.setdefault(byte, {})
        node["b" if bounded else None] = {}

    def build(node: dict) -> bytes:
        if None in node:
            return b""                            # a shorter literal already matches here
        alts = [re.escape(bytes([byte])) + build(sub) for byte, sub in sorted(
            (k, v) for k, v in node.items() if isinstance(k, int))]
        if "b" in node:
            alts.append(rb"\b")
        return alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"

    return build(trie)


def _build(literals: tuple[str, ...]) -> Matcher:
    try:
        return _Hyperscan(literals)
    except ImportError:
        return _TrieRegex(literals)
    except Exception:       # a wheel that does not run on this CPU: the pure-Python matcher is exact too
        return _TrieRegex(literals)


@lru_cache(maxsize=1)
def anchors() -> Anchors:
    """The anchors of the signature data and of the reader's own structural lines: those stored
    in the compiled signatures JSON when it is current and was derived by this code, else derived
    now (slower, never different)."""
    from . import sigdata

    stored = sigdata.compiled_anchors()
    if isinstance(stored, dict) and stored.get("stamp") == code_stamp():
        found = Anchors.from_json(stored)
        if found is not None:
            return found
    return derive(sigdata.entries())


@lru_cache(maxsize=None)
def matcher(which: str) -> Matcher:
    """The compiled matcher of a group of anchors, built on first use: "every" (while the server
    starts), "ready" (up, not serving: access lines only when a POST), "serving" (access lines
    left out: once serving they say nothing) or "feed" (lines that may make a record of their own)."""
    found = anchors()
    # Up and not yet serving: of the access lines only a POST can show the server serving.
    ready = found.feed + found.stats + tuple(s for s in found.served if s != ACCESS_ANCHOR) + (READY_ANCHOR,)
    groups = {"every": found.every, "ready": ready, "serving": found.feed + found.stats, "feed": found.feed}
    return _build(groups[which])


def serving_lines(buf: bytearray, a: int, b: int) -> tuple[list[int], set[int] | None]:
    """The starts of the lines of buf[a:b] that may matter while serving (matcher("serving")),
    and of those among them that hold stats anchors only (None when the matcher cannot tell:
    is_stats_line then checks each line itself)."""
    m = matcher("serving")
    if isinstance(m, _Hyperscan):
        return m.split_starts(buf, a, b, len(anchors().feed))
    return m.starts(buf, a, b), None


@lru_cache(maxsize=1)
def stats_patterns() -> tuple[re.Pattern[bytes], ...]:
    """The stats-line signatures as bytes patterns: a line held raw as a stats line must be one."""
    from . import sigdata

    return tuple(re.compile(e.pattern.encode()) for e in sigdata.entries() if e.kind == "stats")


def is_stats_line(raw: bytes | bytearray, feed_free: bool = False) -> bool:
    """A line that a stats signature matches (checked on its bytes) and that holds no anchor of a
    record of another kind (`feed_free`: known already): held raw once serving, parsed only if
    still kept."""
    if not stats_match(raw):
        return False
    if feed_free:
        return True
    line = bytearray(raw) + b"\n"
    return not matcher("feed").starts(line, 0, len(line))


_last_stats = [0]


def stats_match(raw: bytes | bytearray) -> bool:
    """Whether a stats signature matches the line (the one that matched last is tried first: a
    log repeats one engine's stats line)."""
    patterns = stats_patterns()
    last = _last_stats[0]
    if last < len(patterns) and patterns[last].search(raw):
        return True
    for i, p in enumerate(patterns):
        if i != last and p.search(raw):
            _last_stats[0] = i
            return True
    return False


# -- what a line passed over can still change -------------------------------------------------

# Every line that parse_line gives a time has a clock ("14:17:03") or is a JSON record with a time
# key (tests/test_prefilter.py checks this on every line of the corpus and the samples).
# Two patterns, each searched on its own: each starts with a literal, which `re` looks for at
# memchr speed (~1.3 GB/s); their alternation, or a leading `\d`, runs at 75-150 MB/s.
_CLOCK = re.compile(rb":\d\d:\d\d")
_JSON_TIME = re.compile(rb'"(?:asctime|time|timestamp|ts|@timestamp)"')


def timed_spots(buf: bytes | bytearray, a: int, b: int) -> list[int]:
    """Where in buf[a:b] a time may be (ends of the clocks and JSON time keys), in order."""
    spots = [m.end() for m in _CLOCK.finditer(buf, a, b)]
    if buf.find(b'"', a, b) >= 0:
        spots = sorted(spots + [m.end() for m in _JSON_TIME.finditer(buf, a, b)])
    return spots


def may_be_timed(buf: bytes | bytearray, a: int = 0, b: int | None = None) -> bool:
    """Whether a line buf[a:b] may carry a time parse_line would read."""
    b = len(buf) if b is None else b
    return _CLOCK.search(buf, a, b) is not None or _JSON_TIME.search(buf, a, b) is not None


def first_time(buf: bytearray, a: int, b: int, times: TimeReference, skipped: Callable[[bytes], bool]):
    """The time of the first line of buf[a:b] that has one, or None. Lines `skipped` says the
    reader skips without a look (request logs, access lines once serving) do not count."""
    pos = a
    while pos < b:
        clock, key = _CLOCK.search(buf, pos, b), _JSON_TIME.search(buf, pos, b)
        m = min((x for x in (clock, key) if x is not None), key=lambda x: x.start(), default=None)
        if m is None:
            return None
        start = buf.rfind(b"\n", a, m.start()) + 1 or a
        end = buf.find(b"\n", m.end(), b)
        end = b if end < 0 else end
        t = _line_time(buf, start, end, times, skipped)
        if t is not None:
            return t
        pos = end + 1
    return None


def last_time(buf: bytearray, a: int, b: int, times: TimeReference, skipped: Callable[[bytes], bool]):
    """The time of the last line of buf[a:b] that has one, or None (`skipped` as for first_time).
    The few lines just before `b` are looked at first (the usual case); then windows growing back
    from there are searched in C, so a long stretch of lines without a time (uvicorn's access
    lines, a blob) costs no Python per line."""
    end = b
    for _ in range(NEAR_LINES):
        if end <= a:
            return None
        colon = buf.rfind(b":", a, end)             # a line without a colon holds no time
        if colon < 0:
            return None
        start = buf.rfind(b"\n", a, colon) + 1 or a
        line_end = buf.find(b"\n", colon, end)
        line_end = end if line_end < 0 else line_end
        if may_be_timed(buf, start, line_end):
            t = _line_time(buf, start, line_end, times, skipped)
            if t is not None:
                return t
        end = start
    hi, width = end, 64 * 1024
    while hi > a:
        lo = max(a, hi - width)
        for spot in reversed(timed_spots(buf, lo, hi)):
            start = buf.rfind(b"\n", a, spot - 1) + 1 or a
            line_end = buf.find(b"\n", spot, end)
            t = _line_time(buf, start, end if line_end < 0 else line_end, times, skipped)
            if t is not None:
                return t
        if lo == a:
            break
        hi, width = lo + 64, width * 2             # overlapping: a stamp cut at `lo` is found whole
    return None


NEAR_LINES = 8


def _line_time(buf: bytearray, start: int, end: int, times: TimeReference, skipped: Callable[[bytes], bool]):
    raw = bytes(buf[start:end])
    if skipped(raw):
        return None
    return parse_line(raw.decode("utf-8", errors="replace"), times).time


# The process prefix vLLM writes on every line ("(EngineCore_DP0 pid=412) "), and a JSON record's
# process id: the first line of each process is a record of its own (SERVER_PROCESS).
PID_MARK = b"pid="
_PID = re.compile(rb"pid=(\d{1,18})\)")
_JSON_PID = re.compile(rb'"process": ?(\d{1,18})(?![\d.eE])')


def new_pid_lines(buf: bytearray, a: int, b: int, known: set[int], counted: dict[bytes, int],
                  pid_of: Callable[[bytes], int | None], refused: dict[bytes, int]) -> list[int]:
    """Starts of the lines in buf[a:b] that show a server process not in `known` for the first
    time (each confirmed by `pid_of`, the reader's own parse). `counted` maps the pid tokens
    already reported to their pid: a chunk whose every "pid=" is one of them is answered by one
    C-level search. A token that is no process prefix here (a pid in a message, or behind a
    syslog prefix) is tried on its first MAX_TRIES lines of each chunk only, and after GIVE_UP
    chunks in which it never was one (counted per token in `refused`) it joins `counted` as -1:
    searched past like a known one."""
    tokens: set[bytes] = set()
    if _unknown_pid(counted).search(buf, a, b):
        tokens = set(_PID.findall(buf, a, b))
    if buf.find(b'"process"', a, b) >= 0:
        tokens |= {b"json:" + t for t in _JSON_PID.findall(buf, a, b)}
    out: list[int] = []
    for token in tokens:
        if token in counted:
            continue
        json_form = token.startswith(b"json:")
        number = int(token[5:] if json_form else token)
        if number in known:
            if not json_form and len(counted) < MAX_COUNTED:
                counted[token] = number
            continue
        if json_form:
            found = (m.start() for m in _JSON_PID.finditer(buf, a, b) if m.group(1) == token[5:])
        else:
            found = _occurrences(buf, b"pid=" + token + b")", a, b)
        seen = False
        for tries, at in enumerate(found):
            if tries >= MAX_TRIES:
                break
            start = buf.rfind(b"\n", a, at) + 1 or a
            end = buf.find(b"\n", at, b)
            if pid_of(bytes(buf[start:b if end < 0 else end])) == number:
                out.append(start)
                seen = True
                break
        if not seen and not json_form:
            refused[token] = refused.get(token, 0) + 1
            if refused[token] >= GIVE_UP and len(counted) < MAX_COUNTED:
                counted[token] = -1
    return sorted(out)


MAX_TRIES = 2
GIVE_UP = 3
MAX_COUNTED = 16


@lru_cache(maxsize=64)
def _unknown_pid_for(tokens: tuple[bytes, ...]) -> re.Pattern[bytes]:
    if not tokens:
        return re.compile(PID_MARK)
    return re.compile(PID_MARK + rb"(?!(?:" + b"|".join(re.escape(t) for t in tokens) + rb")\))")


def _unknown_pid(counted: dict[bytes, int]) -> re.Pattern[bytes]:
    """A search for a "pid=" that is none of the counted tokens."""
    return _unknown_pid_for(tuple(sorted(counted)))


def _occurrences(buf: bytearray, needle: bytes, a: int, b: int):
    at = buf.find(needle, a, b)
    while at >= 0:
        yield at
        at = buf.find(needle, at + len(needle), b)
