"""The log reader's state machine: one line at a time in, evidence records out.

Only lines that carry a known signature, a traceback frame or an exception become records.
Multi-line records (tracebacks, failure messages wrapped over lines, memory_summary() tables)
are gathered until they end; each failure record notes the lifecycle phase of its source at
that line and how long the server had been up; a storm of the same error is counted into time
buckets (repeats.py) instead of making a record per line. The methods under "the serving fast
path" are what log_fast_path.py calls to count repetitive lines without feeding them one by one.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Iterator

from ..model import Evidence, Phase
from ..units import whole
from .base import InputFile, ParseContext
from .kinds import Kind
from .log_lifecycle import FAILURE_KINDS, advance_phase

# Logger levels a server states a failure at (logline.py reads them from each engine's prefix).
FAILURE_LEVELS = frozenset({"ERROR", "CRITICAL", "FATAL"})
from .log_patterns import (ACCESS_MARK, BENIGN_EXCEPTIONS, CARET, CHAINED, CHUNK, CHUNK_MARKS, CUT_FRAME, EXCEPTION,
                           FRAME, FRAME_TAIL, INLINE_FRAME, REQUEST_REJECTED, is_request_log, raised_by_source_line,
                           short_path)
from .log_stats_window import RawStats, StatsWindow
from .logline import LogLine, parse_line
from .repeats import NoiseMarkers, RepeatBuckets, StatsMarkers, clock_key, family, traceback_family
from .signatures import match_message, pool_detail
from .torch_oom import is_complete, parse_torch_oom

MAX_FRAMES = 80
# An access line answered with a server error (`"POST /v1/completions HTTP/1.1" 500`) after a
# failure: a request the incident failed. Such lines are counted, not recorded one by one (a log
# holds one record for them all), and only once the log has shown a failure: before it, looking
# for them would cost the access-line fast path another pass over its bytes. ERROR_MARK is the
# cheap test of one line.
ERROR_MARK = b'" 5'
_ERROR_ACCESS = re.compile(rb' HTTP/[\d.]{1,4}" 5\d\d\b')
_ERROR_REQUEST = re.compile(r'"([A-Z]{3,7}) (\S+) HTTP/[\d.]{1,4}" (5\d\d)\b')
MAX_PIDS = 256                  # distinct server PIDs reported per log (a fleet log may interleave many)


@dataclass
class _Traceback:
    """A Python traceback being read: its frames so far and where it started."""
    frames: list[tuple] = field(default_factory=list)       # (file, line, function[, source line])
    start_line: int = 0
    open: bool = False
    after_frame: bool = False        # the next line is the frame's source line, indented or not
    after_quiet: bool = False        # the line before it made no record (uvicorn's "Exception in ASGI application")
    code_line: int = 0               # where the innermost frame's source line is


@dataclass
class _Pending:
    """A failure message that may continue on the next lines (wrapped pastes, SGLang detail)."""

    kind: Kind
    line: int
    log: LogLine
    text: str
    fields: dict[str, Any]
    budget: int = 6


class LogScanner:
    """Feeds on (line number, raw line) and yields evidence. One instance per input file."""

    def __init__(self, src: InputFile, ctx: ParseContext):
        self.src = src
        self.ctx = ctx
        self.phase = Phase.UNKNOWN
        self.lifecycle_start: datetime | None = None
        self._last_time: datetime | None = None
        self.gap: tuple[bytearray, int, int, bool] | None = None   # lines passed over unread (see pass_over)
        self.tracebacks: dict[Any, _Traceback] = {}
        self.pending: _Pending | None = None
        self.cut_frame: str | None = None    # a frame line the wrap cut inside its path (see feed)
        self.summary: tuple[int, list[str]] | None = None   # a memory_summary() table being read
        self.records = 0
        self.stats = StatsWindow(self._raw_stats_record)
        self.repeats = RepeatBuckets(lambda text: parse_line(text, self.ctx.times).time)
        self.line = ""                   # the line being fed: a repeated record's bucket is keyed by its time
        self.chunk = CHUNK               # the serving fast path's chunk size (see MIN_CHUNK)
        self.fed_records = 0             # records before the line being fed
        self.fed_line = 0                # the line being fed
        self.quiet_line = -1             # the last fed line that made no record
        self.repeated_tb: int | None = None   # first line of a traceback just closed as a repeat (see learn_block)
        self.noise = NoiseMarkers()
        self.stats_marks = StatsMarkers()
        self.admissions = False          # an admission line was seen while serving: count them per chunk
        self.pids: set[int] = set()     # server PIDs already reported (first sighting only)
        self.pid_tokens: dict[bytes, int] = {}   # their "pid=N" spellings, for the prefilter's counts
        self.pid_refusals: dict[bytes, int] = {}  # chunks in which a "pid=N" was no process prefix
        self.failed = False              # a failure record was made: 5xx access lines count from here
        self.errors = 0                  # access lines answered with a 5xx status since (see ERROR_MARK)
        self.first_error: tuple[int, bytes] | None = None   # the first one: (line number, line)

    # -- public -------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Reading a multi-line record: every line counts until it ends."""
        return self.pending is not None or self.summary is not None or bool(self.tracebacks)

    @property
    def last_time(self) -> datetime | None:
        """The time of the last line with one, lines passed over included."""
        if self.gap is not None:
            self.settle()
        return self._last_time

    def pid_of(self, raw: bytes) -> int | None:
        """The server PID a raw line carries, as feed would read it."""
        return parse_line(raw.decode("utf-8", errors="replace"), self.ctx.times).pid

    def pass_over(self, buf: bytearray, start: int, end: int, next_line: int) -> None:
        """buf[start:end] (whole lines, the last one just before line `next_line`) is passed over
        unread: none of its lines could make a record. What they could still change — the first
        and last time seen — is read from their bytes when it is asked for (see settle)."""
        if start >= end:
            return
        if self.failed:
            self._count_errors(buf, start, end, next_line)
        serving = self.phase is Phase.SERVING
        if self.gap is not None:
            if self.gap[0] is buf and self.gap[2] == start and self.gap[3] == serving:
                start = self.gap[1]
            else:
                self.settle()
        self.gap = (buf, start, end, serving)
        self.fed_line, self.fed_records = next_line - 1, self.records    # that line made no record

    def settle(self) -> None:
        """Bring the times up to date with the lines passed over (before their buffer is reused)."""
        if self.gap is None:
            return
        from . import prefilter     # only files read in bulk pass lines over

        buf, start, end, serving = self.gap
        self.gap = None
        # The lines feed never sees (skippable) leave no time behind.
        skipped = _skipped_serving if serving else is_request_log
        if self.lifecycle_start is None:
            self.lifecycle_start = prefilter.first_time(buf, start, end, self.ctx.times, skipped)
        when = prefilter.last_time(buf, start, end, self.ctx.times, skipped)
        if when is not None:
            self._last_time = when

    def skippable(self, raw: bytes, lineno: int | None = None) -> bool:
        """Cheap bytes-level test for the lines that dominate big logs and never matter once serving.

        Access-log lines only tell us the server is serving (the first one is kept; one answered
        with a 5xx status after a failure is counted, given its line number); request-log lines
        carry user prompts, which must never be mistaken for the server's own errors.
        """
        if self.busy:
            return False
        if ACCESS_MARK in raw:
            if self.phase is not Phase.SERVING:
                return False
            if self.failed and lineno is not None and ERROR_MARK in raw:
                self._count_errors(raw, 0, len(raw), lineno)
            return True
        return is_request_log(raw)

    def feed(self, lineno: int, raw: str) -> Iterator[Evidence]:
        self.line = raw
        if self.failed and '" 5' in raw:
            encoded = raw.encode("utf-8", errors="replace")
            self._count_errors(encoded, 0, len(encoded), lineno)
        self.repeats.new_line()
        if self.records == self.fed_records:
            self.quiet_line = self.fed_line       # the line fed before this one made no record
        self.fed_line, self.fed_records = lineno, self.records
        log = parse_line(raw, self.ctx.times)
        if self.gap is not None:
            if log.time is None or self.lifecycle_start is None:
                self.settle()
            else:
                self.gap = None      # this line's own time is the last one now
        if log.time is not None:
            self._last_time = log.time
            if self.lifecycle_start is None:
                self.lifecycle_start = log.time
        msg = log.message
        if log.pid is not None and log.pid not in self.pids and len(self.pids) < MAX_PIDS:
            yield self._server_process(lineno, log)
        stripped = msg.strip()
        if self.summary is not None or "PyTorch CUDA memory summary" in msg:
            if (yield from self._summary_line(lineno, log, raw.rstrip())):
                return
        if self.pending is not None:
            done = yield from self._continue_pending(lineno, log, stripped)
            if not done:
                return
        if not stripped:
            return
        key = log.pid or log.rank or 0
        tb = self.tracebacks.get(key)

        cut, self.cut_frame = self.cut_frame, None
        if cut is not None and FRAME_TAIL.match(raw):
            # The rest of a frame the wrap cut inside its path: the two pieces are one frame line
            # (the wrap falls anywhere, so they join with no space).
            msg = cut + raw.strip()
        elif CUT_FRAME.match(msg) and '", line ' not in msg:
            self.cut_frame = msg.rstrip("\r\n")
        frame = FRAME.match(msg)
        if frame:
            if tb is None:
                tb = self.tracebacks[key] = _Traceback()
            if not tb.start_line:
                tb.start_line = lineno
            tb.open = True
            tb.after_frame = True
            if len(tb.frames) < MAX_FRAMES:
                tb.frames.append((frame.group(1), whole(frame.group(2)), frame.group(3)))
            return
        if msg.count('File "', 0, 4096) >= 2:
            # A flattened traceback: its frames are read from the one line; the exception it ends
            # with (when it is on this line too) is read below, as on a traceback's last line.
            inline = INLINE_FRAME.findall(msg)
            if len(inline) >= 2:
                if tb is None or not tb.open:
                    tb = self.tracebacks[key] = _Traceback(start_line=lineno, open=True)
                tb.after_frame = False
                room = MAX_FRAMES - len(tb.frames)
                tb.frames.extend((path, whole(num), fn) for path, num, fn in inline[:max(0, room)])
        if "Traceback (most recent call last)" in msg:
            if tb is not None and tb.frames:
                yield from self._close_traceback(key, lineno, None, log)
            self.tracebacks[key] = _Traceback(start_line=lineno, open=True, after_quiet=self.quiet_line == lineno - 1)
            tb = self.tracebacks[key]
        if tb is not None and tb.open and tb.frames:
            code_line = tb.after_frame and not EXCEPTION.match(stripped)
            tb.after_frame = False
            if code_line and len(tb.frames[-1]) == 3:
                tb.frames[-1] = (*tb.frames[-1], stripped[:160])
                tb.code_line = lineno
            if code_line or CARET.match(msg) or (log.indented and not EXCEPTION.match(stripped)) \
                    or any(c in msg for c in CHAINED):
                return  # source code / caret lines inside a traceback

        if stripped.startswith(("vllm:", "DCGM_", "dcgm_")):
            from .prometheus import sample_records

            found = sample_records(self.src, self.ctx, stripped, lineno, log.time)
            self.records += len(found)
            yield from found
            if found:
                return
        matches = match_message(msg)
        exc = EXCEPTION.match(stripped)
        if tb is not None and tb.open and (exc or matches) and tb.frames:
            yield from self._close_traceback(key, lineno, exc, log, [k for k, _ in matches])
        elif tb is not None and tb.open and tb.frames and not exc:
            yield from self._close_traceback(key, lineno, None, log)

        emitted = False
        for kind, fields in matches:
            if kind is Kind.REQUEST_SERVED:
                # Only the request that shows the server serving is worth a record; count the rest.
                before = self.phase
                self._advance_phase(kind, fields, log.time)
                if before is not Phase.SERVING and self.phase is Phase.SERVING:
                    yield self._record(lineno, log.time, kind, stripped, dict(fields))
                emitted = True
                continue
            if kind in (Kind.TORCH_OOM, Kind.KV_POOL_OOM) and not _complete(kind, fields):
                self.pending = _Pending(kind, lineno, log, stripped, fields)
                emitted = True
                continue
            yield from self._emit(lineno, log, kind, stripped, fields)
            emitted = True
        if exc and not emitted and exc.group("type") not in BENIGN_EXCEPTIONS and not REQUEST_REJECTED.search(stripped):
            yield from self._emit(lineno, log, Kind.EXCEPTION, stripped,
                                  {"type": exc.group("type"), "message": (exc.group("msg") or "")[:300]})
        elif not exc and not emitted and log.level in FAILURE_LEVELS and not REQUEST_REJECTED.search(stripped) \
                and "Traceback (most recent call last)" not in msg and not any(c in msg for c in CHAINED) \
                and not CARET.match(msg):          # a traceback's carets, its frame lost above the excerpt
            # The server logged it as an error and no entry says what it is: a failure all the same,
            # so an excerpt holding one is never read as healthy (what failed is then unknown).
            fields = {"type": None, "message": stripped[:300]}
            if log.file:
                fields["logger_file"] = log.file    # the module that logged it (what it was doing)
            yield from self._emit(lineno, log, Kind.EXCEPTION, stripped, fields)

    def finish(self) -> Iterator[Evidence]:
        self.settle()
        yield from self._finish_records()
        if self.first_error is not None:
            yield self._errors_record()
        self.repeats.close()
        yield from self.stats.flush()

    # -- the serving fast path: repetitive lines ------------------------------------------------
    def skip_block(self, buf: bytearray, pos: int, lineno: int) -> tuple[int, int] | None:
        """(position, line number) after a known repeated error block at buf[pos:], counted into
        its buckets; None when none is there."""
        size = self.repeats.skip_block(buf, pos, lineno, self.last_time)
        return (pos + size, lineno + self.repeats.block.lines) if size and self.repeats.block else None

    def learn_block(self, buf: bytearray, end: int, lineno: int) -> None:
        """The line just fed (ending at buf[end]) closed a repeated traceback: when that line made
        only repeated records, remember the traceback's bytes for skip_block — from the line
        before it when that one made no record either (uvicorn's "Exception in ASGI application")."""
        first, self.repeated_tb = self.repeated_tb, None
        if first is None or self.busy or self.records - self.fed_records != self.repeats.started:
            return
        start = end
        for _ in range(lineno - first + 1):       # back to the block's first line, within buf
            start = buf.rfind(b"\n", 0, start - 1) + 1
            if start <= 0:
                return
        self.repeats.learn_block(bytes(buf[start:end]), first, CHUNK_MARKS)

    def blocks_in(self, buf: bytearray, a: int, b: int) -> int:
        """How many times the known repeated block is in buf[a:b], when all of them can be counted
        at once (0 otherwise)."""
        block = self.repeats.block
        if block is None or not block.countable:
            return 0
        n = buf.count(block.data, a, b)
        if not n or any(m in block.data for m in self.noise.markers) or not self.repeats.block_fits(self.last_time):
            return 0
        return n

    def admitted(self) -> bool:
        """An admission line met while serving (says nothing new): from now on counted per chunk."""
        self.admissions = True
        return True

    def learn_stats_mark(self, raw: bytes | bytearray) -> None:
        """`raw` is a stats line no known mark is in: learn how its message starts."""
        if not any(mark in raw for mark in self.stats_marks.markers):
            message = parse_line(raw.decode("utf-8", errors="replace"), self.ctx.times).message
            self.stats_marks.learn(message.encode("utf-8"))

    def hold_stats(self, lineno: int, raw: bytes | bytearray) -> None:
        """A stats line met while serving, kept unparsed (counted now, parsed if still kept)."""
        self.records += 1
        self.stats.hold((lineno, bytes(raw), self.ctx.next_seq()))

    def _raw_stats_record(self, item: RawStats) -> Evidence | None:
        lineno, raw, seq = item
        log = parse_line(raw.decode("utf-8", errors="replace"), self.ctx.times)
        for kind, fields in match_message(log.message):
            if kind is Kind.STATS:
                fields = dict(fields)
                if log.process:
                    fields.setdefault("process", log.process)
                if log.level:
                    fields.setdefault("level", log.level)
                return replace(self.ctx.evidence(self.src, lineno, kind, log.message.strip(), time=log.time, **fields),
                               seq=seq)
        return None

    def repeated(self, lineno: int, raw: bytes | bytearray, fam: str) -> Iterator[Evidence]:
        """A line of a repeated family met while serving (a preemption warning, a retraction):
        counted into its open time bucket, or read in full (its record opens a new bucket)."""
        if self.repeats.fits(fam, self.repeats.key(raw)):
            self.repeats.add(fam, lineno, raw)
            return
        yield from self.feed(lineno, raw.decode("utf-8", errors="replace"))

    def _finish_records(self) -> Iterator[Evidence]:
        if self.summary is not None:
            yield from self._summary_line(0, parse_line("", self.ctx.times), "")
        if self.pending is not None:
            p, self.pending = self.pending, None
            yield from self._emit(p.line, p.log, p.kind, p.text, p.fields)
        for key in list(self.tracebacks):
            tb = self.tracebacks[key]
            if tb.frames:
                yield from self._close_traceback(key, None, None, None)

    # -- internals ----------------------------------------------------------------------------
    def _count_errors(self, buf: bytes | bytearray, start: int, end: int, next_line: int) -> None:
        """Count the 5xx access lines in buf[start:end], whole lines numbered as pass_over's are
        (the first one's number plus the newlines is `next_line`); keep the first one met."""
        at = start
        if self.first_error is None:
            first = _ERROR_ACCESS.search(buf, start, end)
            if first is None:
                return
            line_start = buf.rfind(b"\n", start, first.start()) + 1 or start
            line_end = buf.find(b"\n", first.end(), end)
            self.first_error = (next_line - buf.count(b"\n", first.start(), end),
                                bytes(buf[line_start:line_end if line_end >= 0 else end]))
            self.errors += 1
            at = first.end()
        self.errors += len(_ERROR_ACCESS.findall(buf, at, end))     # one C-level pass

    def _errors_record(self) -> Evidence:
        """One record for the log's 5xx access lines: the first one, with `repeats` counting all."""
        lineno, raw = self.first_error
        log = parse_line(raw.decode("utf-8", errors="replace"), self.ctx.times)
        text = log.message.strip()
        m = _ERROR_REQUEST.search(text)
        fields: dict[str, Any] = {"method": m.group(1), "path": m.group(2), "status": int(m.group(3))} if m else {}
        fields["repeats"] = self.errors
        return self._record(lineno, log.time, Kind.REQUEST_SERVED, text, fields)

    def _server_process(self, lineno: int, log: LogLine) -> Evidence:
        """The first line a server process wrote: its PID, role and a time it was already alive.

        Recovery confirms a PID against this before signalling it: a process that started after
        this line was written cannot be the one that wrote it (the PID was reused)."""
        assert log.pid is not None
        self.pids.add(log.pid)
        role = log.process or "process"
        fields = {"pid": log.pid, "role": role, "rank": log.rank}
        return self._record(lineno, log.time, Kind.SERVER_PROCESS, f"{role} pid={log.pid}", fields)

    def _summary_line(self, lineno: int, log: LogLine, msg: str) -> Iterator[Evidence]:
        """Collect a memory_summary() table (about 40 '|' lines); True while the line was part of it."""
        if self.summary is None:
            self.summary = (lineno, [msg])
            return True
        start, lines = self.summary
        # Table rows end with "|" (the CI-gutter envelope would eat their leading "| ").
        if msg.endswith("|") and len(lines) < 80:
            lines.append(msg)
            return True
        self.summary = None
        from .memory_stats import parse_summary_lines

        fields = parse_summary_lines(lines)
        if fields:
            yield self._record(start, log.time, Kind.MEMORY_STATS, "torch.cuda.memory_summary() table", fields)
        return False

    def _continue_pending(self, lineno: int, log: LogLine, stripped: str) -> Iterator[Evidence]:
        """Join wrapped continuation lines of a failure message. Returns True when done."""
        p = self.pending
        assert p is not None
        joined = f"{p.text} {stripped}"
        if p.kind is Kind.TORCH_OOM:
            fields = parse_torch_oom(joined)
            grew = fields is not None and _filled(fields) > _filled(p.fields)
        else:
            detail = pool_detail(stripped)
            fields = {**p.fields, **detail}
            grew = bool(detail)
        p.budget -= 1
        if grew and fields is not None:
            p.fields, p.text = fields, joined
            if _complete(p.kind, fields) or p.budget <= 0:
                self.pending = None
                yield from self._emit(p.line, p.log, p.kind, p.text, p.fields)
            return False
        if stripped and p.budget > 0 and not FRAME.match(log.message) and p.kind is Kind.KV_POOL_OOM and not stripped.startswith(("terminate", "Fatal")):
            return False  # SGLang prints its detail a line or two later
        self.pending = None
        yield from self._emit(p.line, p.log, p.kind, p.text, p.fields)
        return True

    def _close_traceback(self, key: Any, lineno: int | None, exc: re.Match[str] | None,
                         log: LogLine | None, kinds: list[Kind] | None = None) -> Iterator[Evidence]:
        tb = self.tracebacks.pop(key)
        frames = tb.frames
        if not frames:
            return
        raised = raised_by_source_line(frames[-1][3]) if exc is None and len(frames[-1]) > 3 else None
        stated, matches = None, []
        if raised is not None:
            stated = f"{raised[0]}: {raised[1]}" if raised[1] else raised[0]
            matches = match_message(stated)
            kinds = [k for k, _ in matches]
        fields = {
            "frames": [list(f) for f in frames],
            "rejected_request": bool(exc and REQUEST_REJECTED.search(exc.group(0))),
            "exception": exc.group("type") if exc else (raised[0] if raised else None),
            "message": ((exc.group("msg") or "")[:300]) if exc else (raised[1][:300] if raised else None),
            "failure_kinds": [k.value for k in (kinds or [])],
            "process": log.process if log else None,
        }
        if raised is not None:
            fields["exception_from_source"] = True
        text = (f"Traceback ({len(frames)} frames, innermost {frames[-1][2]} in {short_path(frames[-1][0])})"
                + (f" -> {exc.group('type')}" if exc else
                   f" -> {raised[0]} (raised on its source line; the exception line is not in the excerpt)" if raised
                   else " (exception line not in the excerpt)"))
        line = tb.start_line or lineno
        fam = traceback_family(fields["exception"], fields["message"], kinds or [])
        key = self._repeat_key() if fam is not None else None
        if fam is not None and self.repeats.fits(fam, key):     # the same error's traceback again
            self.repeats.add(fam, line, self.line.encode("utf-8", errors="replace"))
            self.repeated_tb = line - 1 if tb.after_quiet else line
            return
        record = self._record(line, log.time if log else self.last_time, Kind.TRACEBACK, text, fields)
        if fam is not None:
            self.repeats.start(fam, key, record, line, self.line.encode("utf-8", errors="replace"))
            self.repeated_tb = line - 1 if tb.after_quiet else line
        yield record
        if stated is not None:
            yield from self._raised_records(tb.code_line or line, log, stated, raised, matches)

    def _raised_records(self, lineno: int, log: LogLine | None, stated: str, raised: tuple[str, str],
                        matches: list[tuple[Kind, dict[str, Any]]]) -> Iterator[Evidence]:
        """What a cut traceback's raising source line says, read as its exception line would be."""
        where = log if log is not None else parse_line("", self.ctx.times)
        for kind, fields in matches:
            yield from self._emit(lineno, where, kind, stated, fields)
        if not matches and raised[0] not in BENIGN_EXCEPTIONS and not REQUEST_REJECTED.search(stated):
            yield from self._emit(lineno, where, Kind.EXCEPTION, stated,
                                  {"type": raised[0], "message": raised[1][:300], "from_source": True})

    def _emit(self, lineno: int, log: LogLine, kind: Kind, text: str, fields: dict[str, Any]) -> Iterator[Evidence]:
        self._advance_phase(kind, fields, log.time)
        fields = dict(fields)
        if log.process:
            fields.setdefault("process", log.process)
        if log.level:
            fields.setdefault("level", log.level)
        fam = family(kind, fields, text)
        key = self._repeat_key() if fam is not None else None
        if fam is not None and self.repeats.fits(fam, key):     # one more of a storm: counted, no record
            self.repeats.add(fam, lineno, self.line.encode("utf-8", errors="replace"))
            return
        record = self._record(lineno, log.time, kind, text, fields)
        if kind is Kind.STATS:
            self.stats.hold(record)
            return
        if kind in FAILURE_KINDS:
            if fam is None:
                self.repeats.close()        # a bucket of repeats does not run across another failure
            yield from self.stats.flush()   # the load just before a failure is kept in full
        if fam is not None:
            self.repeats.start(fam, key, record, lineno, self.line.encode("utf-8", errors="replace"))
        yield record

    def _repeat_key(self) -> bytes | None:
        """The time bucket of the line being fed: its own time, or its source's last one."""
        return self.repeats.key(self.line[:64].encode("utf-8", errors="replace")) or \
            clock_key(self.last_time, self.repeats.level)

    def _record(self, lineno: int | None, time: datetime | None, kind: Kind, text: str,
                fields: dict[str, Any]) -> Evidence:
        if kind in FAILURE_KINDS:
            self.failed = True
            fields["phase"] = self.phase.value
            start = self.lifecycle_start
            when = time or self.last_time
            if start is not None and when is not None:
                fields["uptime_s"] = max(0.0, (when - start).total_seconds())
        self.records += 1
        return self.ctx.evidence(self.src, lineno, kind, text, time=time, **fields)

    def _advance_phase(self, kind: Kind, fields: dict[str, Any], time: datetime | None) -> None:
        self.phase, self.lifecycle_start = advance_phase(self.phase, self.lifecycle_start, kind, fields, time)


def _skipped_serving(raw: bytes) -> bool:
    return ACCESS_MARK in raw or is_request_log(raw)


def _complete(kind: Kind, fields: dict[str, Any]) -> bool:
    if kind is Kind.TORCH_OOM:
        return is_complete(fields)
    if fields.get("engine") != "sglang":
        return True
    return "evictable_tokens" in fields and ("free_tokens" in fields or "available_tokens" in fields)


def _filled(fields: dict[str, Any]) -> int:
    return sum(1 for v in fields.values() if v not in (None, [], ""))
