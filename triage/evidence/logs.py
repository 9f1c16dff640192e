"""Server logs (vLLM V0/V1, SGLang, TGI, kernel lines pasted beside them) -> evidence.

Streaming: lines are read in blocks with a bounded buffer; only lines that carry a known
signature, a traceback frame or an exception become records. Each record notes the lifecycle
phase of its source at that line (starting / ready / serving), which the flowchart needs to
tell a start-up OOM from a runtime one, and how long the server had been up.
"""
from __future__ import annotations

import gzip
import io
import re
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Callable, Iterator

from ..errors import BadInput
from ..model import Evidence, Phase
from .base import MAX_LINE_BYTES, InputFile, ParseContext
from .kinds import Kind
from .logline import LogLine, parse_line
from .repeats import (ADMISSION_MARK, PREEMPT_FAMILY, PREEMPT_MARK, RETRACT_MARK, STATS_MARK, NoiseMarkers,
                      RepeatBuckets, clock_key, family, traceback_family)
from .signatures import match_message, pool_detail
from ..units import whole
from .torch_oom import is_complete, parse_torch_oom

NAME = "log"

BLOCK = 1024 * 1024
MAX_FRAMES = 80
MAX_PIDS = 256                  # distinct server PIDs reported per log (a fleet log may interleave many)

_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in (\S+)')
_CARET = re.compile(r"^\s*[\^~]+\s*$")
_EXCEPTION = re.compile(
    r"^(?:[\w.]+\.)?(?P<type>[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure|Aborted))(?::\s?(?P<msg>.*))?$")
# A request the API server refused (too long, malformed): the client gets a 4xx, the server serves on.
REQUEST_REJECTED = re.compile(
    r"maximum context length is \d+|Please reduce the length|is longer than the maximum model length"
    r"|Error in preprocessing prompt inputs|exceeds the maximum (?:allowed|number of)|Input validation error"
    r"|chat_template is not set|Cannot use chat template functions|is too long and exceeds limit")
# Exceptions a healthy server logs on shutdown or when a client goes away: not failures.
BENIGN_EXCEPTIONS = frozenset({
    "CancelledError", "KeyboardInterrupt", "SystemExit", "GeneratorExit", "ConnectionResetError",
    "BrokenPipeError", "ConnectionAbortedError", "ClientDisconnect", "ClientDisconnected", "StopAsyncIteration",
    # raised in a client (openai / httpx) pasted beside the server's log: the client's problem
    "APITimeoutError", "APIConnectionError", "ReadTimeout", "ConnectTimeout",
})
_CHAIN = ("The above exception was the direct cause", "During handling of the above exception")
# vLLM's request logging (--enable-log-requests): prompts and outputs, i.e. user text.
_REQUEST_LOG_MARKERS = (b"Received request", b"Added request", b"Finished request", b"Generated response",
                        b"Aborted request", b"prompt: '", b"prompt_token_ids")
# vLLM's admission line ("Added request <id>.") names a request id and nothing the user wrote:
# kept, because it shows the engine taking a request (serving) right before a failure.
_ADMISSION = b"Added request "
_USER_TEXT = (b"prompt", b"params", b"'", b'"')


def is_request_log(raw: bytes) -> bool:
    if _ADMISSION in raw and not any(m in raw for m in _USER_TEXT):
        return False
    return any(marker in raw for marker in _REQUEST_LOG_MARKERS)


_NON_SERVING_PATHS = ("/health", "/metrics", "/v1/models", "/ping", "/version", "/load", "/docs", "/openapi.json")

_LIFECYCLE_RESET = {Kind.STARTUP_BEGIN, Kind.ENGINE_VERSION, Kind.WEIGHTS_LOADED}
_STARTUP_PROGRESS = {Kind.MEMORY_PROFILE, Kind.KV_CAPACITY, Kind.MAX_CONCURRENCY,
                     Kind.AVAILABLE_KV_MEMORY, Kind.GRAPH_CAPTURE, Kind.STARTUP_STEP}
_FAILURE_KINDS = {
    Kind.TORCH_OOM, Kind.CUDA_OOM, Kind.KV_CACHE_INSUFFICIENT, Kind.NO_CACHE_BLOCKS, Kind.FREE_MEMORY_LOW,
    Kind.WARMUP_OOM, Kind.LOAD_MODEL_OOM, Kind.PROFILING_ERROR, Kind.KV_POOL_OOM, Kind.ENGINE_START_FAILED,
    Kind.ENGINE_DEAD, Kind.REQUEST_FAILED, Kind.PROCESS_DIED, Kind.TRACEBACK, Kind.EXCEPTION, Kind.HOST_OOM_KILL, Kind.OOM_KILLED, Kind.CHILD_KILLED,
    Kind.XID, Kind.ILLEGAL_MEMORY_ACCESS, Kind.ECC_ERROR, Kind.GPU_LOST, Kind.NCCL_ERROR, Kind.CUDA_ERROR,
    Kind.HOST_MEMORY_EXHAUSTED, Kind.PROCESS_CRASH, Kind.SETUP_ERROR,
}


def sniff(head: bytes, name: str) -> int:
    """Any text is a candidate log; the dedicated parsers outbid this for their formats."""
    return 1


@dataclass
class _Traceback:
    frames: list[tuple] = field(default_factory=list)       # (file, line, function[, source line])
    start_line: int = 0
    open: bool = False
    after_frame: bool = False        # the next line is the frame's source line, indented or not
    after_quiet: bool = False        # the line before it made no record (uvicorn's "Exception in ASGI application")


@dataclass
class _Pending:
    """A failure message that may continue on the next lines (wrapped pastes, SGLang detail)."""

    kind: Kind
    line: int
    log: LogLine
    text: str
    fields: dict[str, Any]
    budget: int = 6


# A stats line held unparsed: (line number, raw bytes, the sequence number its record takes).
RawStats = tuple


class _StatsWindow:
    """Stats lines in bounded memory: the most recent ones in full, older ones thinned out.

    A month of V1 logs has ~260k stats lines; the rules need the minutes before a failure (kept
    whole, flushed when a failure is recorded) and a trend over the rest (every k-th line, k
    doubling whenever the history would pass HISTORY lines). Lines met on the serving fast path
    are held as raw bytes and parsed (by `parse`) only if they are still kept when flushed.
    """

    RECENT = 256
    HISTORY = 1024

    def __init__(self, parse: "Callable[[RawStats], Evidence | None]" = lambda raw: None) -> None:
        from collections import deque

        self.parse = parse
        self.recent: "deque[Evidence | RawStats]" = deque()
        self.history: "list[Evidence | RawStats]" = []
        self.step = 1
        self.count = 0

    def hold(self, record: "Evidence | RawStats") -> None:
        self.recent.append(record)
        if len(self.recent) > self.RECENT:
            old = self.recent.popleft()
            self.count += 1
            if self.count % self.step == 0:
                self.history.append(old)
                if len(self.history) > self.HISTORY:
                    self.history = self.history[::2]
                    self.step *= 2

    def flush(self) -> Iterator[Evidence]:
        out = self.history + list(self.recent)
        self.history, self.recent = [], type(self.recent)()
        for item in out:
            record = self.parse(item) if isinstance(item, tuple) else item
            if record is not None:
                yield record


class LogScanner:
    """Feeds on (line number, raw line) and yields evidence. One instance per input file."""

    def __init__(self, src: InputFile, ctx: ParseContext):
        self.src = src
        self.ctx = ctx
        self.phase = Phase.UNKNOWN
        self.lifecycle_start: datetime | None = None
        self.last_time: datetime | None = None
        self.tracebacks: dict[Any, _Traceback] = {}
        self.pending: _Pending | None = None
        self.summary: tuple[int, list[str]] | None = None   # a memory_summary() table being read
        self.records = 0
        self.stats = _StatsWindow(self._raw_stats_record)
        self.repeats = RepeatBuckets(lambda text: parse_line(text, self.ctx.times).time)
        self.line = ""                   # the line being fed: a repeated record's bucket is keyed by its time
        self.chunk = CHUNK               # the serving fast path's chunk size (see MIN_CHUNK)
        self.fed_records = 0             # records before the line being fed
        self.fed_line = 0                # the line being fed
        self.quiet_line = -1             # the last fed line that made no record
        self.repeated_tb: int | None = None   # first line of a traceback just closed as a repeat (see learn_block)
        self.noise = NoiseMarkers()
        self.admissions = False          # an admission line was seen while serving: count them per chunk
        self.pids: set[int] = set()     # server PIDs already reported (first sighting only)

    # -- public -------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Reading a multi-line record: every line counts until it ends."""
        return self.pending is not None or self.summary is not None or bool(self.tracebacks)

    def skippable(self, raw: bytes) -> bool:
        """Cheap bytes-level test for the lines that dominate big logs and never matter once serving.

        Access-log lines only tell us the server is serving (the first one is kept); request-log
        lines carry user prompts, which must never be mistaken for the server's own errors.
        """
        if self.busy:
            return False
        if ACCESS_MARK in raw:
            return self.phase is Phase.SERVING
        return is_request_log(raw)

    def feed(self, lineno: int, raw: str) -> Iterator[Evidence]:
        self.line = raw
        self.repeats.new_line()
        if self.records == self.fed_records:
            self.quiet_line = self.fed_line       # the line fed before this one made no record
        self.fed_line, self.fed_records = lineno, self.records
        log = parse_line(raw, self.ctx.times)
        if log.time is not None:
            self.last_time = log.time
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

        frame = _FRAME.match(msg)
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
        if "Traceback (most recent call last)" in msg:
            if tb is not None and tb.frames:
                yield from self._close_traceback(key, lineno, None, log)
            self.tracebacks[key] = _Traceback(start_line=lineno, open=True, after_quiet=self.quiet_line == lineno - 1)
            tb = self.tracebacks[key]
        if tb is not None and tb.open and tb.frames:
            code_line = tb.after_frame and not _EXCEPTION.match(stripped)
            tb.after_frame = False
            if code_line and len(tb.frames[-1]) == 3:
                tb.frames[-1] = (*tb.frames[-1], stripped[:160])
            if code_line or _CARET.match(msg) or (log.indented and not _EXCEPTION.match(stripped)) \
                    or any(c in msg for c in _CHAIN):
                return  # source code / caret lines inside a traceback

        if stripped.startswith(("vllm:", "DCGM_", "dcgm_")):
            from .prometheus import sample_records

            found = sample_records(self.src, self.ctx, stripped, lineno, log.time)
            self.records += len(found)
            yield from found
            if found:
                return
        matches = match_message(msg)
        exc = _EXCEPTION.match(stripped)
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

    def finish(self) -> Iterator[Evidence]:
        yield from self._finish_records()
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
        self.repeats.learn_block(bytes(buf[start:end]), first, _CHUNK_MARKS)

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
        if stripped and p.budget > 0 and not _FRAME.match(log.message) and p.kind is Kind.KV_POOL_OOM and not stripped.startswith(("terminate", "Fatal")):
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
        fields = {
            "frames": [list(f) for f in frames],
            "rejected_request": bool(exc and REQUEST_REJECTED.search(exc.group(0))),
            "exception": exc.group("type") if exc else None,
            "message": ((exc.group("msg") or "")[:300]) if exc else None,
            "failure_kinds": [k.value for k in (kinds or [])],
            "process": log.process if log else None,
        }
        text = (f"Traceback ({len(frames)} frames, innermost {frames[-1][2]} in {short_path(frames[-1][0])})"
                + (f" -> {exc.group('type')}" if exc else " (exception line not in the excerpt)"))
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
        if kind in _FAILURE_KINDS:
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
        if kind in _FAILURE_KINDS:
            fields["phase"] = self.phase.value
            start = self.lifecycle_start
            when = time or self.last_time
            if start is not None and when is not None:
                fields["uptime_s"] = max(0.0, (when - start).total_seconds())
        self.records += 1
        return self.ctx.evidence(self.src, lineno, kind, text, time=time, **fields)

    def _advance_phase(self, kind: Kind, fields: dict[str, Any], time: datetime | None) -> None:
        if kind in _LIFECYCLE_RESET or (kind is Kind.LAUNCH_CONFIG and fields.get("origin") == "engine config"):
            if self.phase in (Phase.SERVING, Phase.READY):
                self.lifecycle_start = time
            if self.phase is not Phase.STARTING:
                self.phase = Phase.STARTING
                self.lifecycle_start = time or self.lifecycle_start
        elif kind in _STARTUP_PROGRESS:
            if self.phase is Phase.UNKNOWN:
                self.phase = Phase.STARTING
        elif kind is Kind.STARTUP_COMPLETE:
            if self.phase is not Phase.SERVING:
                self.phase = Phase.READY
        elif kind is Kind.REQUEST_SERVED:
            # Inference is a POST (completions, chat, generate, embeddings); a probe's GET or HEAD
            # of / or /health shows a server that is up, not one that serves.
            path = str(fields.get("path", ""))
            if fields.get("status", 500) < 500 and fields.get("method", "POST") == "POST" \
                    and not path.startswith(_NON_SERVING_PATHS):
                self.phase = Phase.SERVING
        elif kind is Kind.STATS:
            if any((fields.get(k) or 0) > 0 for k in ("running", "prompt_tps", "generation_tps", "kv_usage", "waiting")):
                self.phase = Phase.SERVING
        elif kind in (Kind.PREEMPTION, Kind.REQUEST_FAILED):
            self.phase = Phase.SERVING


def _complete(kind: Kind, fields: dict[str, Any]) -> bool:
    if kind is Kind.TORCH_OOM:
        return is_complete(fields)
    if fields.get("engine") != "sglang":
        return True
    return "evictable_tokens" in fields and ("free_tokens" in fields or "available_tokens" in fields)


def _filled(fields: dict[str, Any]) -> int:
    return sum(1 for v in fields.values() if v not in (None, [], ""))


def short_path(path: str) -> str:
    """The last two parts of a source path, for one-line summaries."""
    return "/".join(path.replace("\\", "/").split("/")[-2:])


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


def _read_into(fh, buf: bytearray, at: int) -> int:
    """Fill buf[at:] from fh; the number of bytes read (0 at the end)."""
    if isinstance(fh, (io.BufferedReader, io.BytesIO, gzip.GzipFile)):
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


# An HTTP access line: uvicorn's `"GET /health HTTP/1.1" 200 OK`, a proxy's `"GET / HTTP/2.0" 200 612`,
# any method, path and HTTP version. The request line is the only place a log writes " HTTP/".
ACCESS_MARK = b' HTTP/'
# A request that shows the server serving: a POST (completions, chat, embeddings). Probes and
# scrapes (GET /health, GET /metrics, HEAD /) before it change nothing.
SERVING_REQUEST = b'"POST '
CHUNK = 64 * 1024
# After a chunk that ended the fast path early (a traceback began: every line counts until it
# ends), the next one starts this small and doubles: a storm of per-request tracebacks would
# otherwise count a whole chunk for each one.
MIN_CHUNK = 2 * 1024
# The markers a serving chunk is counted by: a repeated block holding one cannot be counted apart.
_CHUNK_MARKS = (ACCESS_MARK, PREEMPT_MARK, STATS_MARK, ADMISSION_MARK, RETRACT_MARK)


def parse(src: InputFile, ctx: ParseContext) -> Iterator[Evidence]:
    scanner = LogScanner(src, ctx)
    lineno = 1
    for buf, end in iter_blocks(src, ctx):
        pos = 0
        while pos < end:
            if scanner.phase is Phase.SERVING and not scanner.busy:
                pos, lineno = yield from _serving_scan(scanner, buf, pos, end, lineno)
                continue
            if scanner.phase is not Phase.STARTING and not scanner.busy:
                # Up (or of unknown phase) and not yet serving: probe and scrape lines are skipped
                # at C speed; a chunk with the first POST is read line by line.
                at = pos
                pos, lineno = yield from _ready_scan(scanner, buf, pos, end, lineno)
                if pos != at:
                    continue
            if not scanner.busy and (skip := scanner.skip_block(buf, pos, lineno)):
                pos, lineno = skip
                continue
            nl = buf.find(b"\n", pos)
            raw = buf[pos:nl]
            if not scanner.skippable(raw):
                yield from scanner.feed(lineno, raw.decode("utf-8", errors="replace"))
                if scanner.repeated_tb is not None:
                    scanner.learn_block(buf, nl + 1, lineno)
            pos, lineno = nl + 1, lineno + 1
    yield from scanner.finish()


def _ready_scan(scanner: "LogScanner", buf: bytearray, pos: int, end: int, lineno: int):
    """Before the first served request: skip the access lines of buf[pos:] (probes, scrapes) and
    feed the others, chunk by chunk, up to a chunk holding a serving request (a POST) or a change
    of phase. Returns (position, line number) to resume at (pos itself: read the next line alone)."""
    count, find = buf.count, buf.find
    a = pos
    while a < end:
        b = find(b"\n", min(a + CHUNK, end - 1), end) + 1 or end
        if find(SERVING_REQUEST, a, b) >= 0:
            return a, lineno
        lines_here = count(b"\n", a, b)
        if lines_here != count(ACCESS_MARK, a, b):
            for at, at_line, raw in _odd_lines(buf, a, b, lineno, lines_here):
                if not scanner.tracebacks and is_request_log(raw):
                    continue
                yield from scanner.feed(at_line, raw.decode("utf-8", errors="replace"))
                if scanner.phase in (Phase.SERVING, Phase.STARTING) or scanner.busy:
                    return at + len(raw) + 1, at_line + 1
        lineno += lines_here
        a = b
    return a, lineno


def _serving_scan(scanner: "LogScanner", buf: bytearray, pos: int, end: int, lineno: int):
    """Feed only the lines of buf[pos:] that can change the verdict while serving; stop where the
    phase changes.

    Chunks whose newline count equals their access-marker count are all access lines and are
    skipped after two C-speed counts. A chunk whose other lines are all repetitive ones —
    preemption warnings, stats lines, admission lines, warnings learned as noise (repeats.py),
    told apart by more counts — is handled without a Python look at each line (see _repeat_chunk). Any other chunk is halved
    until the pieces are small (see _odd_lines) and its odd lines are read one by one. (A line
    holding two markers could hide one line of its chunk; uvicorn writes the request line once.)
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
        if storm:
            # Counting the chunk's lines piece by piece between its stats lines numbers them too.
            stats_at, stats_lines, lines_here = _numbered(buf, STATS_MARK, a, b, lineno)
        else:
            stats_at, stats_lines, lines_here = None, None, count(b"\n", a, b)
        known = count(ACCESS_MARK, a, b)
        storm = lines_here != known
        if storm:
            if stats_at is None:
                stats_at, stats_lines, _ = _numbered(buf, STATS_MARK, a, b, lineno)
            pre, stats = count(PREEMPT_MARK, a, b), len(stats_at)
            blocks = scanner.blocks_in(buf, a, b)
            rest = lines_here - known - pre - stats - blocks * (scanner.repeats.block.lines if blocks else 0)
            for marker in scanner.noise.markers:
                if rest <= 0:
                    break
                rest -= count(marker, a, b)
            if rest == 0 or (scanner.admissions and rest == count(ADMISSION_MARK, a, b)):
                if blocks:                     # a dead engine's per-request tracebacks, counted whole
                    last = buf.rfind(scanner.repeats.block.data, a, b)
                    scanner.repeats.add_blocks(lineno + lines_here - count(b"\n", last, b), blocks)
                yield from _repeat_chunk(scanner, buf, a, b, lineno, lines_here, pre, stats_at, stats_lines)
            else:
                for at, at_line, raw in _odd_lines(buf, a, b, lineno, lines_here):
                    if PREEMPT_MARK in raw:
                        yield from scanner.repeated(at_line, raw, PREEMPT_FAMILY)
                    elif RETRACT_MARK in raw:
                        yield from scanner.repeated(at_line, raw, "retract")
                    elif STATS_MARK in raw:
                        scanner.hold_stats(at_line, raw)
                    elif ADMISSION_MARK in raw and scanner.admitted() or raw in scanner.noise or \
                            (not scanner.tracebacks and is_request_log(raw)):
                        continue
                    elif skip := scanner.skip_block(buf, at, at_line):
                        return skip                          # a known repeated error, counted
                    else:
                        made = False
                        for record in scanner.feed(at_line, raw.decode("utf-8", errors="replace")):
                            made = True
                            yield record
                        if not made and scanner.phase is Phase.SERVING and not scanner.busy:
                            scanner.noise.learn(raw)
                    if scanner.phase is not Phase.SERVING or scanner.busy:
                        scanner.chunk = MIN_CHUNK
                        return at + len(raw) + 1, at_line + 1          # resume just after this line
        scanner.chunk = min(CHUNK, scanner.chunk * 2)
        lineno += lines_here
        a = b
    return end, lineno


def _repeat_chunk(scanner: "LogScanner", buf: bytearray, a: int, b: int, lineno: int, lines_here: int, pre: int,
                  stats_at: list[int], stats_lines: list[int]):
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


def _numbered(buf: bytearray, mark: bytes, a: int, b: int, lineno: int) -> tuple[list[int], list[int], int]:
    """The starts of the lines of buf[a:b] holding `mark`, their line numbers, and the number of
    lines in buf[a:b]: the newlines are counted once, piece by piece between those lines."""
    find, rfind, count = buf.find, buf.rfind, buf.count
    starts, numbers = [], []
    pos, line = a, lineno
    at = find(mark, a, b)
    while at >= 0:
        start = rfind(b"\n", a, at) + 1 or a
        line += count(b"\n", pos, start)
        pos = start
        starts.append(start)
        numbers.append(line)
        at = find(mark, at + len(mark), b)
    return starts, numbers, line - lineno + count(b"\n", pos, b)


def _hold(scanner: "LogScanner", buf: bytearray, starts: list[int], numbers: list[int], s: int, before: int,
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


def _odd_lines(buf: bytearray, a: int, b: int, lineno: int, lines: int) -> Iterator[tuple[int, int, bytearray]]:
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
                yield from _odd_lines(buf, a, mid, lineno, left)
            right = lines - left
            if not left_odd or right != buf.count(ACCESS_MARK, mid, b):
                yield from _odd_lines(buf, mid, b, lineno + left, right)
            return
    at = a
    for i, raw in enumerate(buf[a:b].split(b"\n")[:-1]):
        if ACCESS_MARK not in raw:
            yield at, lineno + i, raw
        at += len(raw) + 1
